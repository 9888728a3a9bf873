"""scripts/scst_sweep.py, SCST from every finished job of a cross-entropy sweep: the commands it builds
for made-up sweeps (which job, which overrides win, what is left out or already done), and one real run of
a tiny SCST job from a tiny cross-entropy model, which compare.py then reads as a sweep."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from experiments import compare, scst_sweep

from support import TINY, compose_train


def xe_job(
    sweep: Path, num: int, overrides: list[str], checkpoint: Path | None, finished: bool = True
) -> Path:
    """A job folder as captioning-train -m leaves it: .hydra/ and run.json naming its best checkpoint."""
    job = sweep / str(num)
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (job / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"job": {"num": num}}}))
    if checkpoint is None:
        checkpoint = job / "checkpoints" / "best.ckpt"
        checkpoint.parent.mkdir()
        checkpoint.write_bytes(b"weights")
    (job / "run.json").write_text(json.dumps({"checkpoint": str(checkpoint), "finished": finished}))
    return job


def commands(out: str) -> dict[str, list[str]]:
    """job name -> its overrides, from the dry run's printed commands."""
    lines = [line for line in out.splitlines() if ": captioning-train " in line]
    return {line.split(":")[0]: line.split(": captioning-train ")[1].split(" ") for line in lines}


def test_each_finished_job_gets_its_own_overrides_its_checkpoint_and_the_shared_recipe(tmp_path, capsys):
    xe, out = tmp_path / "xe", tmp_path / "scst"
    base = ["trainer.max_time=00:04:00:00", "hydra.sweep.dir=/somewhere", "ckpt_path=auto"]
    xe_job(xe, 0, ["seed=0", "experiment=flickr8k_soft", *base], None)
    xe_job(xe, 1, ["seed=0", "experiment=flickr8k_hard_reinforce", "+model.extra=1", *base], None)
    xe_job(xe, 2, ["seed=1", "experiment=flickr8k_soft", *base], None, finished=False)  # still training
    assert scst_sweep.main([str(xe), "--out", str(out), "--dry-run", "trainer.max_epochs=5",
                            "trainer.max_time=00:02:00:00"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    runs = commands(printed)
    assert list(runs) == ["0", "1"]
    for name, experiment, extra in (
        ("0", "flickr8k_soft", []),
        ("1", "flickr8k_hard_reinforce", ["+model.extra=1"]),
    ):
        assert runs[name] == [
            "seed=0", f"experiment={experiment}", *extra,  # the XE job's own, in its order
            "objective=scst", "trainer.max_epochs=5", "trainer.max_time=00:02:00:00",  # the recipe wins
            f"init_from={(xe / name / 'checkpoints' / 'best.ckpt').resolve()}",
            f"hydra.run.dir={(out / name).resolve()}", "ckpt_path=auto",
        ]  # fmt: skip
    assert "left out: 2: its cross-entropy run has not finished" in printed


def test_finished_scst_jobs_are_not_run_again_and_missing_checkpoints_are_named(tmp_path, capsys):
    xe, out = tmp_path / "xe", tmp_path / "scst"
    xe_job(xe, 0, ["seed=0"], None)
    xe_job(xe, 1, ["seed=1"], tmp_path / "gone.ckpt")
    (out / "0").mkdir(parents=True)
    (out / "0" / "run.json").write_text(json.dumps({"checkpoint": "x", "finished": True}))
    assert scst_sweep.main([str(xe), "--out", str(out), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert commands(printed) == {}
    assert "0: SCST finished before" in printed
    assert f"left out: 1: run.json names '{tmp_path / 'gone.ckpt'}', which is missing" in printed


def test_only_takes_the_jobs_with_that_override_so_two_calls_never_share_a_run(tmp_path, capsys):
    xe, out = tmp_path / "xe", tmp_path / "scst"
    xe_job(xe, 4, ["seed=1", "experiment=flickr8k_soft"], None)
    xe_job(xe, 8, ["seed=2", "experiment=flickr8k_soft"], None)
    xe_job(xe, 9, ["seed=2", "experiment=flickr8k_hard_reinforce"], None, finished=False)
    assert scst_sweep.main([str(xe), "--out", str(out), "--dry-run", "--only", "seed=1"]) == 0
    printed = capsys.readouterr().out
    assert list(commands(printed)) == ["4"]
    assert "left out" not in printed  # job 9 is another call's: not this one's to report
    assert scst_sweep.main([str(xe), "--out", str(out), "--dry-run", "--only", "seed=2"]) == 0
    assert list(commands(capsys.readouterr().out)) == ["8"]
    only = ["--only", "seed=2", "--only", "experiment=flickr8k_soft"]
    assert scst_sweep.main([str(xe), "--out", str(out), "--dry-run", *only]) == 0
    assert list(commands(capsys.readouterr().out)) == ["8"]
    assert scst_sweep.main([str(xe), "--out", str(out), "--dry-run", "--only", "seed=7"]) == 1
    assert "no finished cross-entropy job in" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["init_from=x.ckpt"], "init_from is set per job by this script"),
        (["hydra.run.dir=/x"], "hydra.run.dir is set per job"),
        (["model.optimizer.lr"], "expected KEY=VALUE"),
        (["--jobs", "0"], "--jobs 0: expected 1 or more"),
        (["--only", "seed"], "--only 'seed': expected NAME=VALUE"),
    ],
)
def test_bad_arguments_get_one_clear_line(tmp_path, capsys, argv, message):
    (tmp_path / "xe").mkdir()
    with pytest.raises(SystemExit):
        scst_sweep.main([str(tmp_path / "xe"), "--out", str(tmp_path / "o"), *argv])
    assert message in capsys.readouterr().err


def test_an_out_folder_inside_the_xe_sweep_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        scst_sweep.main([str(tmp_path), "--out", str(tmp_path / "scst")])
    assert "inside the XE sweep" in capsys.readouterr().err


def test_a_folder_without_finished_jobs_fails(tmp_path, capsys):
    (tmp_path / "xe").mkdir()
    assert scst_sweep.main([str(tmp_path / "xe"), "--out", str(tmp_path / "o")]) == 1
    assert "no finished cross-entropy job" in capsys.readouterr().out


@pytest.mark.slow  # one captioning-train of 2 SCST steps: ~20 s
def test_a_real_scst_job_starts_from_its_xe_run_and_compare_reads_the_sweep(tmp_path, capsys):
    from captioning.training.train import train

    xe_ckpt = train(compose_train([*TINY, "trainer.max_epochs=1", "seed=3"], tmp_path / "xe_run"))
    xe, out = tmp_path / "xe", tmp_path / "scst"
    # as Hydra writes overrides.yaml: special characters escaped, which Hydra reads back as they were typed
    xe_job(
        xe, 0, [*TINY, "seed=3", "trainer.max_epochs=1", r"trainer.max_time=00\:00\:30\:00"], Path(xe_ckpt)
    )
    xe_job(xe, 1, [*TINY, "seed=4"], tmp_path / "broken.ckpt")
    (tmp_path / "broken.ckpt").write_text("not a checkpoint")  # its SCST run fails; job 0's still runs
    recipe = ["trainer.max_steps=2", "model.num_samples=2", "trainer.enable_progress_bar=false"]
    assert scst_sweep.main([str(xe), "--out", str(out), "--jobs", "2", *recipe]) == 1
    printed = capsys.readouterr().out
    assert "0: finished" in printed and "1: FAILED (exit 2)" in printed  # captioning-train's usage error
    assert "broken.ckpt: not a readable checkpoint" in printed  # the end of its log
    summary = json.loads((out / "0" / "run.json").read_text())
    assert summary["finished"] and summary["global_step"] == 2
    config = yaml.safe_load((out / "0" / ".hydra" / "config.yaml").read_text())
    assert config["seed"] == 3 and config["init_from"] == str(Path(xe_ckpt).resolve())
    assert config["trainer"]["max_time"] == "00:00:30:00"
    assert config["model"]["_target_"].endswith("SelfCriticalLitModule")
    (job,) = [j for j in compare.find_jobs(out) if j["summary"] is not None]
    assert compare.swept_keys([job]) == [] and job["overrides"]["objective"] == "scst"
    # A second call starts nothing for the finished job (ckpt_path=auto would not train it either).
    assert scst_sweep.main([str(xe), "--out", str(out), "--dry-run"]) == 0
    assert "0: SCST finished before" in capsys.readouterr().out
