"""scripts/soft_vs_hard_sweep.py, the whole comparison as one command: the chain it plans for each pair (job
numbers as Hydra's sweeper numbers one ``-m`` sweep, the readings each decoder takes, commands the called
scripts accept, records and reports), what it refuses or skips, and how its chains run: in order, a failing
step stopping only its own chain, a pair another process holds left to it."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
import yaml
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser

from experiments import compare, scst_sweep, soft_vs_hard
from experiments import soft_vs_hard_sweep as sweep

HARD = ("flickr8k_hard_reinforce", "flickr8k_hard_gumbel")  # the decoders whose attention picks one cell


def planned(capsys, argv: list[str], status: int = 0) -> dict[str, list[tuple[str, list[str]]]]:
    """chain name -> its (step, argv) from the dry run; the reports under "when every chain has ended"."""
    assert sweep.main([*argv, "--dry-run"]) == status
    chains, current = {}, None
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("# "):
            current = chains.setdefault(line[2:], [])
        elif current is not None:
            name, _, command = line.partition(": ")
            current.append((name, shlex.split(command)))
    return chains


def hydra_job_numbers(seeds: str, experiments: list[str]) -> dict[tuple[str, int], int]:
    """(experiment, seed) -> job number, as Hydra's basic sweeper numbers ``-m seed=... experiment=...``."""
    parsed = OverridesParser.create().parse_overrides(
        [f"seed={seeds}", f"experiment={','.join(experiments)}"]
    )
    jobs = [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]
    return {(dict(o.split("=") for o in job)["experiment"], int(dict(o.split("=") for o in job)["seed"])): n
            for n, job in enumerate(jobs)}  # fmt: skip


@pytest.mark.parametrize("experiment", sweep.EXPERIMENTS)
def test_each_decoder_gets_hydras_job_number_and_the_readings_its_attention_declares(
    tmp_path, capsys, experiment
):
    chains = planned(
        capsys, ["--root", str(tmp_path), "--only", "seed=2", "--only", f"experiment={experiment}"]
    )
    assert list(chains) == [f"{experiment}-seed2", "when every chain has ended"]
    steps = chains[f"{experiment}-seed2"]
    job = hydra_job_numbers("0,1,2", sweep.EXPERIMENTS)[experiment, 2]
    name, train = steps[0]
    assert name == "cross-entropy" and train[1:5] == [
        "-m",
        "seed=2",
        f"experiment={experiment}",
        *sweep.XE_RECIPE[:1],
    ]
    assert train[-3:] == [
        f"hydra.sweep.dir={(tmp_path / 'xe').resolve()}",
        f"hydra.sweep.subdir={job}",
        "ckpt_path=auto",
    ]
    (tmp_path / "xe").mkdir()
    (tmp_path / "scst").mkdir()
    for objective, folder in (("cross-entropy", "xe"), ("SCST", "scst")):
        parsed = [compare.parse_args(cmd[2:]) for n, cmd in steps if n == f"evaluate {objective}"]
        assert [compare.setting_name(a) for a in parsed] == [
            "val-beam3", "val-beam5", "val-beam5-length_penalty=1",
            *(["val-beam5-hard_attention=expected"] if experiment in HARD else []),
        ]  # fmt: skip
        for args in parsed:  # the one job of this pair, in this objective's sweep
            assert args.sweep_dir == tmp_path / folder
            assert args.only == {"seed": {"2"}, "experiment": {experiment}}
    scst = scst_sweep.parse_args(next(cmd for n, cmd in steps if n == "SCST")[2:])
    assert (scst.xe_sweep, scst.out) == (tmp_path / "xe", tmp_path / "scst")
    assert scst.only == {"seed": {"2"}, "experiment": {experiment}} and scst.recipe == sweep.SCST_RECIPE
    assert not any(n.startswith("record") for n, _ in steps)  # no --record: nothing written to the docs


def test_the_grid_its_filters_the_records_and_the_reports(tmp_path, capsys):
    record = tmp_path / "docs"
    chains = planned(capsys, ["--root", str(tmp_path), "--only", "experiment=flickr8k_soft", "--only",
                              "experiment=flickr8k_transformer", "--record", str(record)])  # fmt: skip
    reports = chains.pop("when every chain has ended")
    numbers = hydra_job_numbers("0,1,2", sweep.EXPERIMENTS)
    assert list(chains) == [
        f"{e}-seed{s}" for s in range(3) for e in ("flickr8k_soft", "flickr8k_transformer")
    ]
    for name, steps in chains.items():
        experiment, seed = name.split("-seed")
        assert steps[0][1][-2] == f"hydra.sweep.subdir={numbers[experiment, int(seed)]}"
        names = [n for n, _ in steps]  # the XE run recorded before its SCST starts (kept if SCST fails)
        assert names.index("record cross-entropy") == names.index("SCST") - 1 and names[-1] == "record SCST"
        assert dict(steps)["record cross-entropy"][2:] == [str(tmp_path / "xe"), "--out", str(record / "xe")]
        assert steps[-1][1][2:] == [str(tmp_path / "scst"), "--out", str(record / "scst"),
                                    "--alias", f"{(tmp_path / 'xe').resolve()}=<xe sweep>"]  # fmt: skip
    record.joinpath("xe").mkdir(parents=True)
    assert [n for n, _ in reports] == ["report xe", "report scst"]
    args = soft_vs_hard.parse_args(reports[0][1][2:])
    assert (args.runs, args.baseline, args.out) == (record / "xe", "flickr8k_soft", record / "report" / "xe")
    # a grid of seeds 1-2 keeps the numbers of the 0-2 grid (seed-major: seed x 4 + place)
    later = planned(
        capsys, ["--root", str(tmp_path), "--seeds", "1,2", "--only", "experiment=flickr8k_hard_gumbel"]
    )
    assert [s[0][1][-2] for n, s in later.items() if n.startswith("flickr8k")] == [
        f"hydra.sweep.subdir={numbers['flickr8k_hard_gumbel', seed]}" for seed in (1, 2)
    ]


def test_recipe_overrides_replace_the_recipes_value_and_data_ones_reach_the_reports(tmp_path, capsys):
    argv = ["--root", str(tmp_path), "--only", "seed=0", "--only", "experiment=flickr8k_soft", "--data", "coco",
            "--xe", "trainer.max_time=null", "--xe", "data.train.limit=100", "--xe", "paths.cache=/fast",
            "--scst", "model.optimizer.lr=5.7e-5", "--scst", "+trainer.devices=8"]  # fmt: skip
    chains = planned(capsys, argv)
    reports = chains.pop("when every chain has ended")
    steps = chains["flickr8k_soft-seed0"]
    train = steps[0][1]
    assert [o for o in train if o.startswith("trainer.max_time")] == ["trainer.max_time=null"]  # one value
    assert "++callbacks.early_stopping=null" in train and "data.train.limit=100" in train
    (tmp_path / "xe").mkdir()
    scst = scst_sweep.parse_args(next(cmd for n, cmd in steps if n == "SCST")[2:])
    assert scst.recipe == [
        "++callbacks.early_stopping=null", "model.scheduler.warmup_steps=50", "trainer.max_epochs=5",
        "model.optimizer.lr=5.7e-5", "+trainer.devices=8",
    ]  # fmt: skip
    args = soft_vs_hard.parse_args(reports[0][1][2:])  # the references are the captions trained on
    assert (args.runs, args.data) == (tmp_path / "xe", "coco")
    assert args.overrides == ["data.train.limit=100", "paths.cache=/fast"]
    # the recipe without --xe / --scst is the results page's, and the references the baseline's data
    plain = planned(capsys, argv[:6])
    steps = plain["flickr8k_soft-seed0"]
    assert steps[0][1][4:6] == sweep.XE_RECIPE
    assert scst_sweep.parse_args(next(c for n, c in steps if n == "SCST")[2:]).recipe == sweep.SCST_RECIPE
    args = soft_vs_hard.parse_args(plain["when every chain has ended"][0][1][2:])
    assert (args.data, args.overrides) == ("flickr8k", [])
    coco = planned(capsys, ["--root", str(tmp_path), "--experiments", "coco_soft,coco_transformer"])
    assert (
        soft_vs_hard.parse_args(coco["when every chain has ended"][0][1][2:]).data == "karpathy"
    )  # coco_base.yaml's data


def write_job(folder: Path, overrides: list[str], settings: list[str]) -> None:
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (folder / "run.json").write_text(json.dumps({"finished": True, "checkpoint": "x"}))
    for setting in settings:
        (folder / "compare" / setting).mkdir(parents=True)
        (folder / "compare" / setting / "results.json").write_text("[]")


def test_another_grids_folder_is_refused_and_a_complete_record_skipped(tmp_path, capsys):
    root, record = tmp_path / "runs", tmp_path / "docs"
    write_job(
        root / "xe" / "1", ["seed=0", "experiment=flickr8k_hard_reinforce"], []
    )  # job 1 of the default grid
    chains = planned(capsys, ["--root", str(root), "--experiments", "flickr8k_soft,flickr8k_transformer"], 1)
    assert "flickr8k_transformer-seed0" not in chains  # its job 1 holds REINFORCE seed 0: never trained over
    settings = ["val-beam3", "val-beam5", "val-beam5-length_penalty=1"]
    for objective in ("xe", "scst"):
        write_job(record / objective / "0", ["seed=0", "experiment=flickr8k_soft"], settings)
    write_job(record / "xe" / "3", ["seed=0", "experiment=flickr8k_transformer"], settings)  # no SCST yet
    argv = ["--root", str(root), "--record", str(record), "--only", "seed=0"]
    chains = planned(
        capsys, [*argv, "--only", "experiment=flickr8k_soft", "--only", "experiment=flickr8k_transformer"]
    )
    assert list(chains) == ["flickr8k_transformer-seed0", "when every chain has ended"]
    assert sweep.main([*argv, "--only", "experiment=flickr8k_soft", "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert f"flickr8k_soft-seed0: recorded in {record} at every setting (job 0): skipped" in printed
    assert "flickr8k_soft-seed0" in planned(capsys, [*argv, "--only", "experiment=flickr8k_soft", "--force"])
    sweep.main(["--root", str(root), "--experiments", "flickr8k_soft,flickr8k_transformer", "--dry-run"])
    assert "flickr8k_transformer-seed0: REFUSED: " in capsys.readouterr().out


def test_reports_wait_for_the_baseline_and_one_other_experiment(tmp_path):
    write_job(tmp_path / "0", ["seed=0", "experiment=flickr8k_transformer"], [])
    assert "no finished flickr8k_soft run" in sweep.not_reportable(tmp_path, "flickr8k_soft")
    write_job(tmp_path / "4", ["seed=1", "experiment=flickr8k_soft"], [])
    assert sweep.not_reportable(tmp_path, "flickr8k_soft") is None
    assert "no finished" in sweep.not_reportable(tmp_path / "missing", "flickr8k_soft")
    write_job(tmp_path / "alone" / "0", ["seed=0", "experiment=flickr8k_soft"], [])
    assert "nothing to compare with" in sweep.not_reportable(tmp_path / "alone", "flickr8k_soft")


def step(code: int, text: str) -> list[str]:
    return [sys.executable, "-c", f"print({text!r}); raise SystemExit({code})"]


def test_a_failing_step_stops_its_chain_only_and_a_held_pair_is_left_to_its_process(
    tmp_path, capsys, monkeypatch
):
    chains = {
        "flickr8k_soft": [("cross-entropy", step(0, "xe soft")), ("SCST", step(0, "scst soft"))],
        "flickr8k_transformer": [("cross-entropy", step(0, "xe tr")), ("SCST", step(3, "scst broke")),
                                 ("evaluate SCST", step(0, "never"))],
        "flickr8k_hard_gumbel": [("cross-entropy", step(0, "not this process's to run"))],
    }  # fmt: skip
    monkeypatch.setattr(sweep, "chain", lambda args, e, s, n: chains[e])
    argv = ["--root", str(tmp_path), "--only", "seed=0", "--experiments", ",".join(chains), "--parallel", "2"]
    with sweep.file_lock(tmp_path / "locks" / "flickr8k_hard_gumbel-seed0.lock") as held:
        assert held
        assert sweep.main(argv) == 1
    printed = capsys.readouterr().out
    assert "flickr8k_soft-seed0: done" in printed
    assert "flickr8k_transformer-seed0: FAILED at SCST (exit 3)" in printed and "scst broke" in printed
    assert "flickr8k_hard_gumbel-seed0: left to the process that holds its lock" in printed  # not a failure
    assert not (tmp_path / "logs" / "flickr8k_hard_gumbel-seed0.log").exists()
    log = (tmp_path / "logs" / "flickr8k_transformer-seed0.log").read_text()
    assert "xe tr" in log and "scst broke" in log and "never" not in log
    assert "report xe: not made yet: no finished flickr8k_soft run" in printed  # nothing trained for real


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--only", "decoder=soft"], "--only decoder=...: expected seed=S or experiment=E"),
        (["--only", "seed"], "--only 'seed': expected NAME=VALUE"),
        (["--parallel", "0"], "--parallel 0: expected 1 or more"),
        (["--seeds", "one"], "invalid literal"),
        (["--seeds", "-1"], "seeds 0 or more"),
        (["--xe", "seed=3"], "--xe 'seed=3': seed is set per pair by this script"),
        (["--scst", "+experiment=x"], "--scst '+experiment=x': experiment is set per pair by this script"),
        (["--xe", "hydra.sweep.dir=x"], "hydra.sweep.dir is set per pair by this script"),
        (["--scst", "init_from=a.ckpt"], "init_from is set per pair by this script"),
        (["--xe", "trainer"], "--xe 'trainer': expected KEY=VALUE (a Hydra override)"),
        (
            ["--experiments", "flickr8k_nope"],
            "experiment=flickr8k_nope: no such option; did you mean experiment=flickr8k_",
        ),
    ],
)
def test_bad_arguments_get_one_clear_line(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit):
        sweep.main(["--root", str(tmp_path), *argv])
    assert message in capsys.readouterr().err


def test_a_filter_outside_the_grid_is_named(tmp_path):
    with pytest.raises(SystemExit, match="no pair of the grid has --only seed=7"):
        sweep.main(["--root", str(tmp_path), "--only", "seed=7", "--dry-run"])


def test_a_record_of_another_pair_is_refused_not_taken_for_this_one(tmp_path, capsys):
    root, record = tmp_path / "runs", tmp_path / "docs"
    settings = ["val-beam3", "val-beam5", "val-beam5-length_penalty=1"]
    for objective in ("xe", "scst"):  # job 0 of another grid: soft seed 0
        write_job(record / objective / "0", ["seed=0", "experiment=flickr8k_soft"], settings)
    argv = ["--root", str(root), "--record", str(record), "--seeds", "0"]
    chains = planned(capsys, [*argv, "--experiments", "flickr8k_transformer,flickr8k_soft"], 1)
    assert "flickr8k_transformer-seed0" not in chains  # neither skipped as recorded nor trained into job 0
    sweep.main([*argv, "--experiments", "flickr8k_transformer,flickr8k_soft", "--dry-run"])
    assert (
        f"flickr8k_transformer-seed0: REFUSED: {record / 'xe' / '0'} holds seed=0 experiment=flickr8k_soft"
        in (capsys.readouterr().out)
    )


def test_a_finished_cross_entropy_job_is_not_launched_again(tmp_path, capsys):
    write_job(tmp_path / "xe" / "0", ["seed=0", "experiment=flickr8k_soft"], [])  # its fit ended
    steps = planned(
        capsys, ["--root", str(tmp_path), "--only", "seed=0", "--only", "experiment=flickr8k_soft"]
    )
    names = [n for n, _ in steps["flickr8k_soft-seed0"]]
    assert "cross-entropy" not in names and names[0] == "evaluate cross-entropy" and "SCST" in names


def test_a_job_folder_another_process_runs_is_left_to_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sweep, "chain", lambda args, e, s, n: [("cross-entropy", step(0, "must not run"))])
    argv = ["--root", str(tmp_path), "--only", "seed=0", "--experiments", "flickr8k_soft"]
    with sweep.file_lock(tmp_path / "locks" / "job-0.lock") as held:  # another grid's pair in job 0
        assert held
        assert sweep.main(argv) == 0  # left to it: not a failure
    assert "flickr8k_soft-seed0: left to the process that holds its lock" in capsys.readouterr().out
    assert not (tmp_path / "logs" / "flickr8k_soft-seed0.log").exists()


def test_an_xe_data_override_names_the_reports_references(tmp_path, capsys):
    chains = planned(capsys, ["--root", str(tmp_path), "--only", "seed=0", "--xe", "data=karpathy"])
    (tmp_path / "xe").mkdir()
    assert soft_vs_hard.parse_args(chains["when every chain has ended"][0][1][2:]).data == "karpathy"
