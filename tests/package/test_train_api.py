"""``captioning.train`` and ``captioning.evaluate``: the commands' work from Python, with their overrides;
a mistake is an exception of one line (never ``SystemExit``), and ``import captioning`` loads neither."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import captioning
from captioning.cli.main import main
from captioning.errors import ConfigError

TINY = ["debug=tiny", "trainer.max_epochs=1", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1"]


def test_train_returns_the_run_folder_its_best_checkpoint_and_metrics(tmp_path):
    run = captioning.train(TINY, run_dir=tmp_path / "run")
    assert run.run_dir == tmp_path / "run"
    assert run.best_checkpoint.is_file() and run.best_checkpoint.is_relative_to(
        tmp_path / "run" / "checkpoints"
    )
    summary = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run.metrics == summary["best"]["metrics"] and "val/CIDEr" in run.metrics
    assert summary["checkpoint"] == str(run.best_checkpoint)
    from captioning.checkpoints.load import load_checkpoint

    assert load_checkpoint(run.best_checkpoint).provenance["data"] == "synthetic"  # what evaluate reads
    # what captioning-train records in the run folder, where scripts/compare.py reads it
    assert (tmp_path / "run" / ".hydra" / "overrides.yaml").read_text().split() == [
        token for o in TINY for token in ("-", o)
    ]
    assert f"output_dir: {tmp_path / 'run'}" in (tmp_path / "run" / ".hydra" / "config.yaml").read_text()


@pytest.mark.parametrize(
    ("overrides", "error", "message"),
    [
        (["trainer.max_epoch=1"], ConfigError, "trainer.max_epoch: no such config key; did you mean trainer.max_epochs?"),
        (["debug=tiny", "trainer.max_epochs=-3"], ConfigError, "trainer.max_epochs=-3: expected an integer >= 1"),
        (["model/decoder=nope"], ConfigError, "model/decoder=nope: no such option (options: hard_gumbel"),
        (["bogus"], ConfigError, "train: 'bogus' is not an override; expected key=value"),
        (["hydra/launcher=local"], ConfigError, "hydra settings other than hydra.run.dir configure the command"),
        ("debug=tiny", TypeError, "expected a list of Hydra overrides"),
        (["output_dir=elsewhere"], ConfigError, "output_dir is the run folder: give run_dir= instead"),
    ],
)  # fmt: skip
def test_bad_overrides_raise_one_line_not_system_exit(overrides, error, message, tmp_path):
    with pytest.raises(error) as caught:
        captioning.train(overrides, run_dir=tmp_path / "run")
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_run_dir_given_twice_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="given together"):
        captioning.train([*TINY, f"hydra.run.dir={tmp_path / 'a'}"], run_dir=tmp_path / "b")


def test_evaluate_scores_as_the_command_does(make_checkpoint, tmp_path, capsys):
    checkpoint = str(make_checkpoint("tiny.ckpt"))
    overrides = ["data.test.num_images=4", "tokenizer=simple", "decoding.num_beams=2"]
    evaluation = captioning.evaluate(checkpoint, overrides, out_dir=tmp_path / "api")
    assert main(["evaluate", "--checkpoint", checkpoint, "--out-dir", str(tmp_path / "cli"), *overrides]) == 0
    api, cli = (json.loads((tmp_path / d / "scores.json").read_text()) for d in ("api", "cli"))
    assert api["scores"] == cli["scores"] == evaluation.report.to_dict()["scores"]
    assert evaluation.decoding["num_beams"] == 2 and len(evaluation.decoded.captions) == 4
    with pytest.raises(ValueError, match=r"num_beams=0: expected an integer in \[1, 64\]"):
        captioning.evaluate(checkpoint, ["decoding.num_beams=0"])


def test_import_captioning_loads_neither_training_nor_the_api():
    code = "import sys, captioning; print(sorted(m for m in sys.modules if m.startswith('captioning')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "['captioning']"
