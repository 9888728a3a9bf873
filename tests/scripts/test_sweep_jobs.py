"""experiments/sweep_jobs.py: how every sweep script finds a sweep's jobs, names their configurations and
selects them (``--only``), on job folders written as Hydra's launchers leave them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from experiments import sweep_jobs


def write_job(sweep: Path, name: str, overrides: list[str], num: int, **summary) -> Path:
    """A job folder: .hydra/overrides.yaml, .hydra/hydra.yaml (job number, decoder choice), run.json."""
    job = sweep / name
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    hydra = {
        "hydra": {"job": {"num": num}, "runtime": {"choices": {"model/decoder": "soft"}, "cwd": str(sweep)}}
    }
    (job / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump(hydra))
    if summary:
        (job / "run.json").write_text(json.dumps(summary))
    return job


def test_jobs_launched_one_at_a_time_are_listed_in_numeric_order(tmp_path):
    for name in (11, 3, 0, 7):  # each launched alone (hydra.sweep.subdir=N): Hydra numbers every one 0
        write_job(tmp_path, str(name), ["seed=0"], num=0, checkpoint="c.ckpt")
    assert [j["name"] for j in sweep_jobs.find_jobs(tmp_path)] == ["0", "3", "7", "11"]


def test_a_job_whose_fit_did_not_end_has_no_summary(tmp_path):
    write_job(tmp_path, "0", ["seed=0"], num=0, checkpoint="c.ckpt", finished=False)
    write_job(tmp_path, "1", ["seed=1"], num=1, checkpoint="c.ckpt", train_seconds=5.0)
    write_job(tmp_path, "2", ["seed=2"], num=2)  # no run.json at all
    jobs = sweep_jobs.find_jobs(tmp_path)
    assert [j["summary"] for j in jobs] == [None, {"checkpoint": "c.ckpt", "train_seconds": 5.0}, None]


def test_configurations_are_named_by_the_swept_keys_but_never_by_a_runs_place(tmp_path):
    plus = ["++callbacks.early_stopping=null"]
    for num, (decoder, seed) in enumerate((d, s) for d in ("soft", "hard") for s in (0, 1)):
        run_keys = [f"init_from=/xe/{num}/best.ckpt", f"hydra.sweep.subdir={num}", f"ckpt_path=/x/{num}"]
        write_job(
            tmp_path, str(num), [f"model/decoder={decoder}", f"seed={seed}", *plus, *run_keys], num, a=1
        )
    jobs = sweep_jobs.find_jobs(tmp_path)
    swept = sweep_jobs.swept_keys(jobs)
    assert swept == ["model/decoder", "seed"]  # init_from, ckpt_path and hydra.* differ too, but name a run
    groups = [k for k in swept if k != sweep_jobs.SEED_KEY]
    assert [sweep_jobs.job_label(j, groups) for j in jobs] == ["soft", "soft", "hard", "hard"]
    assert [sweep_jobs.job_seed(j) for j in jobs] == [0, 1, 0, 1]
    assert sweep_jobs.common_overrides(jobs, swept) == ["callbacks.early_stopping=null"]
    assert sweep_jobs.job_label(jobs[2], ["model/decoder", "seed"]) == "model/decoder=hard seed=0"
    assert sweep_jobs.job_label(jobs[2], []) == "soft"  # nothing swept: the decoder the config chose


def test_a_seed_not_overridden_is_read_from_the_jobs_config(tmp_path):
    job = write_job(tmp_path, "0", ["model/decoder=soft"], 0, a=1)
    (job / ".hydra" / "config.yaml").write_text("seed: 7\n")
    write_job(tmp_path, "1", ["model/decoder=soft"], 1, a=1)  # no config.yaml: seed 0
    assert [sweep_jobs.job_seed(j) for j in sweep_jobs.find_jobs(tmp_path)] == [7, 0]


def test_only_accepts_either_value_of_a_key_given_twice_and_every_key(tmp_path):
    for num, (decoder, seed) in enumerate((d, s) for d in ("a", "b") for s in (0, 1, 2)):
        write_job(tmp_path, str(num), [f"model/decoder={decoder}", f"seed={seed}"], num, a=1)
    only = sweep_jobs.only_filter(["seed=0", "seed=2", "model/decoder=b"])
    assert only == {"seed": {"0", "2"}, "model/decoder": {"b"}}
    jobs = sweep_jobs.find_jobs(tmp_path)
    assert [j["name"] for j in jobs if sweep_jobs.has_overrides(j, only)] == ["3", "5"]
    assert sweep_jobs.describe_only(only) == "--only seed=0 --only seed=2 --only model/decoder=b"
    with pytest.raises(ValueError, match="--only 'seed': expected NAME=VALUE"):
        sweep_jobs.only_filter(["seed"])


def test_a_moved_sweep_finds_its_checkpoint_in_the_jobs_own_folder(tmp_path):
    old = tmp_path / "old" / "0" / "checkpoints" / "best.ckpt"
    job = write_job(tmp_path / "new", "0", ["seed=0"], 0, checkpoint=str(old))
    (job / "checkpoints").mkdir()
    assert sweep_jobs.job_checkpoint(sweep_jobs.find_jobs(tmp_path / "new")[0]) is None  # not there yet
    (job / "checkpoints" / "best.ckpt").write_bytes(b"x")
    assert (
        sweep_jobs.job_checkpoint(sweep_jobs.find_jobs(tmp_path / "new")[0])
        == job.resolve() / "checkpoints" / "best.ckpt"
    )


def test_later_overrides_replace_the_same_key_whatever_its_prefix():
    base = ["seed=0", "+trainer.devices=2", "model.optimizer.lr=1e-3", "++callbacks.early_stopping=null"]
    extra = ["trainer.devices=8", "model.optimizer.lr=2e-4", "objective=scst"]
    assert sweep_jobs.with_overrides(base, extra) == ["seed=0", "++callbacks.early_stopping=null", *extra]
    assert sweep_jobs.with_overrides(base, []) == base


@pytest.mark.parametrize(
    "text, reserved, problem",
    [
        ("model.optimizer.lr=2e-4", (), None),
        ("++callbacks.early_stopping=null", (), None),
        ("model.optimizer.lr", (), "expected KEY=VALUE (a Hydra override)"),
        ("+=3", (), "expected KEY=VALUE (a Hydra override)"),
        ("init_from=a.ckpt", (), "init_from is set per job by this script"),
        ("hydra.sweep.dir=x", (), "hydra.sweep.dir is set per job by this script"),
        ("+seed=3", ("seed",), "seed is set per job by this script"),
        ("seed=3", (), None),  # reserved only where the caller says so
    ],
)
def test_override_problem_names_what_a_sweep_script_sets_itself(text, reserved, problem):
    assert sweep_jobs.override_problem(text, reserved=reserved) == problem
    if problem and "per job" in problem:
        assert sweep_jobs.override_problem(text, reserved=reserved, per="pair") == problem.replace(
            "job", "pair"
        )
