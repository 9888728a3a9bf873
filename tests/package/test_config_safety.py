"""captioning/config_safety.py and config_command_line.py: a config folder cannot make the entry points call
what the project does not allow (the attacks below wrote or truncated files before the allow-list)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from captioning.compose import CONFIG_DIR, compose_config
from captioning.config_command_line import command_line_problem
from captioning.config_safety import target_problems
from captioning.errors import ConfigError

CONF = Path(CONFIG_DIR)
# Every option of every group the train config composes (experiments and debug included), as overrides.
GROUP_OPTIONS = sorted(
    f"{p.parent.relative_to(CONF).as_posix()}={p.stem}"
    for p in CONF.rglob("*.yaml")
    if p.parent != CONF
    and p.parent.relative_to(CONF).parts[0] not in {"scoring", "hydra", "rerank"}  # optional / below / eval
    and p.parent.relative_to(CONF).as_posix() not in {"model/decoder/attention", "debug/decoder"}  # chosen by
)  # their decoder, not on the command line


def _attack(folder: Path, victim: Path, node: str) -> None:
    """A user config folder whose ``callbacks`` group has an option ``evil`` with ``node`` as its body."""
    (folder / "callbacks").mkdir(parents=True)
    (folder / "callbacks" / "evil.yaml").write_text(node.replace("VICTIM", str(victim)))


ATTACKS = {
    "shutil.copyfile": "evil:\n  _target_: shutil.copyfile\n  src: /etc/hostname\n  dst: VICTIM\n",
    "builtins.open": "evil:\n  _target_: builtins.open\n  file: VICTIM\n  mode: w\n",
    "pathlib.Path.write_text": (
        "evil:\n  _target_: pathlib.Path.write_text\n  self: {_target_: pathlib.Path, _args_: [VICTIM]}\n"
        "  data: pwned\n"
    ),
    # the same calls reached through an allowed package's attribute, nested, or partial
    "through captioning": "evil:\n  _target_: captioning.data.readers.Path.write_text\n  self: VICTIM\n",
    "nested in a list": "evil:\n  _target_: pytorch_lightning.callbacks.Timer\n  _args_: [{_target_: os.remove, path: VICTIM}]\n",
    "partial": "evil:\n  _target_: captioning.data.files.write_text_atomically\n  _partial_: true\n",
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_a_user_config_folder_cannot_call_what_is_not_allowed(tmp_path, name):
    victim = tmp_path / "victim.txt"
    victim.write_text("original")
    _attack(tmp_path / "conf", victim, ATTACKS[name])
    line = command_line_problem(
        ["--config-dir", str(tmp_path / "conf"), "callbacks=evil"], CONFIG_DIR, "train"
    )
    assert line is not None and "\n" not in line
    assert "callbacks.evil" in line and "_target_=" in line
    assert victim.read_text() == "original"


def test_the_refusal_comes_before_anything_runs_end_to_end(tmp_path):
    """``captioning-train --config-dir``: exit status 2, one line, the file untouched, no run folder made."""
    victim = tmp_path / "victim.txt"
    victim.write_text("original")
    _attack(tmp_path / "conf", victim, ATTACKS["shutil.copyfile"])
    run = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "captioning.training.train", "--config-dir", str(tmp_path / "conf"),
         "callbacks=evil", "debug=tiny", f"hydra.run.dir={run}"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "callbacks.evil._target_=shutil.copyfile: not an allowed target" in lines[0]
    assert victim.read_text() == "original" and not run.exists()


def test_hydra_callbacks_and_searchpath_are_checked_too(tmp_path):
    victim = tmp_path / "victim.txt"
    line = command_line_problem(
        ["+hydra.callbacks.evil._target_=builtins.open", f"+hydra.callbacks.evil.file={victim}"],
        CONFIG_DIR,
        "train",
    )
    assert line and "hydra.callbacks.evil._target_=builtins.open" in line
    _attack(tmp_path / "conf", victim, ATTACKS["builtins.open"])
    with pytest.raises(ConfigError, match=r"callbacks.evil._target_=builtins.open"):  # evaluate, tune, bank
        compose_config("train", [f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "callbacks=evil"])
    assert not victim.exists()


def test_a_sweep_is_checked_as_hydra_composes_it(tmp_path):
    _attack(tmp_path / "conf", tmp_path / "v", ATTACKS["shutil.copyfile"])
    args = ["--config-dir", str(tmp_path / "conf"), "-m", "seed=0,1", "callbacks=evil"]
    assert "shutil.copyfile" in command_line_problem(args, CONFIG_DIR, "train")
    assert (
        command_line_problem(["-m", "seed=0,1", "model/decoder=soft,transformer"], CONFIG_DIR, "train")
        is None
    )


@pytest.mark.parametrize("override", GROUP_OPTIONS)
def test_every_option_of_every_group_passes_the_allow_list(override):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(config_name="train", overrides=[override], return_hydra_config=True)
    assert target_problems(cfg) == []


@pytest.mark.parametrize("launcher", ["local", "slurm"])
def test_the_launchers_and_eval_config_pass(launcher):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(config_name="train", overrides=[f"hydra/launcher={launcher}"], return_hydra_config=True)
        evaluation = compose(config_name="eval", overrides=["rerank=consensus"], return_hydra_config=True)
    assert target_problems(cfg) == [] and target_problems(evaluation) == []


def test_allowed_targets_adds_a_package_but_never_the_standard_library(tmp_path):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(config_name="train", overrides=["+callbacks.mine._target_=yaml.YAMLObject"])
        assert target_problems(cfg) == ["callbacks.mine._target_=yaml.YAMLObject: not an allowed target"]
        cfg = compose(
            config_name="train",
            overrides=["+callbacks.mine._target_=yaml.YAMLObject", "allowed_targets=[yaml]"],
        )
        assert target_problems(cfg) == []
        cfg = compose(
            config_name="train",
            overrides=["+callbacks.x._target_=shutil.copyfile", "allowed_targets=[shutil]"],
        )
        curated = compose(
            config_name="train", overrides=["+callbacks.x._target_=torch.save", "allowed_targets=[torch]"]
        )
    assert target_problems(curated)[0].startswith(
        "allowed_targets: 'torch': what configs may build from torch"
    )
    assert "callbacks.x._target_=torch.save: not an allowed target" in target_problems(curated)[1]
    problems = target_problems(cfg)
    assert problems[0].startswith("allowed_targets: 'shutil' is part of Python's standard library")
    assert problems[1].startswith("callbacks.x._target_=shutil.copyfile: not an allowed target")


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("torch.save", "not an allowed target"),
        ("pytorch_lightning.Trainer.save_checkpoint", "not a class"),
        ("captioning.training.train.os.system", "not an allowed target"),
        ("captioning.data.readers.json.dump", "defined outside the allowed packages"),
        ("captioning.data.readers.os.remove", "defined outside the allowed packages"),
        ("torch.optim._functional.adam", "a private name"),
    ],
)
def test_names_reached_through_allowed_packages_are_refused(target, why, monkeypatch):
    import json
    import os

    import captioning.data.readers

    monkeypatch.setattr(captioning.data.readers, "json", json, raising=False)  # as a module importing them
    monkeypatch.setattr(captioning.data.readers, "os", os, raising=False)
    assert why in target_problems({"x": {"_target_": target}})[0]


def test_a_defaults_cycle_is_one_line(tmp_path):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "a.yaml").write_text("defaults:\n  - b\n")
    (tmp_path / "conf" / "b.yaml").write_text("defaults:\n  - a\n")
    line = command_line_problem(
        ["--config-dir", str(tmp_path / "conf"), "--config-name", "a"], CONFIG_DIR, "train"
    )
    assert line is not None and "\n" not in line and len(line) < 400


def test_one_invalid_job_of_a_sweep_is_named_before_any_job_starts(tmp_path):
    """Before, its SystemExit stopped the joblib sweep and the valid jobs left nothing."""
    from captioning.training.validate import check_config

    args = ["-m", "seed=0,1", "trainer.max_steps=10,-5"]
    line = command_line_problem(args, CONFIG_DIR, "train", check_job=check_config)
    assert line.startswith("sweep job 1 of 4 (seed=0 trainer.max_steps=-5): trainer.max_steps=-5: expected")
    assert line.endswith("no job was started")
    assert (
        command_line_problem(
            ["-m", "seed=0,1", "trainer.max_steps=10,20"], CONFIG_DIR, "train", check_job=check_config
        )
        is None
    )
    sweep = tmp_path / "sweep"
    result = subprocess.run(
        [sys.executable, "-m", "captioning.training.train", "-m", "hydra/launcher=local", *args[1:],
         f"hydra.sweep.dir={sweep}"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2 and result.stderr.strip() == f"captioning-train: error: {line}"
    assert not sweep.exists()


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        (
            "hydra.job_logging.handlers.file.filename=/tmp/victim.txt",
            "a log file is written inside the run's folder",
        ),
        ("hydra.job_logging.handlers.file.class=logging.handlers.SocketHandler", "expected one of logging."),
        (
            "callbacks=evil",
            "hydra.job_logging.handlers.x.()=shutil.copyfile: logging factories are not allowed",
        ),
    ],
)
def test_hydras_logging_config_cannot_write_elsewhere_or_build_anything(tmp_path, override, fragment):
    (tmp_path / "callbacks").mkdir()
    (tmp_path / "callbacks" / "evil.yaml").write_text(  # a group option that sets Hydra's own node
        "# @package _global_\nhydra:\n  job_logging:\n    handlers:\n      x:\n        (): shutil.copyfile\n"
    )
    line = command_line_problem(["--config-dir", str(tmp_path), override], CONFIG_DIR, "train")
    assert line is not None and fragment in line and "\n" not in line


def test_a_defaults_cycle_through_a_searchpath_is_one_config_error(tmp_path):
    (tmp_path / "callbacks").mkdir()
    (tmp_path / "callbacks" / "loop.yaml").write_text("defaults:\n  - loop\n")
    with pytest.raises(ConfigError, match="defaults lists include each other"):
        compose_config("eval", [f"hydra.searchpath=[file://{tmp_path}]", "+callbacks=loop"])
