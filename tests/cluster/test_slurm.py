"""On a real SLURM cluster (scripts/slurm_local.sh: n1 and n2 on 127.0.0.1): the project's own launcher
(hydra/launcher=slurm) runs sweeps and DDP jobs with the same results as without SLURM, the sbatch
template (scripts/slurm_train.sbatch) survives a preemption, its time-limit warning and a real time limit
by itself, and every cluster command of the docs runs as written, in its CPU form
(tests/support/cluster_commands.py).

All cluster tests live in this one file: ``make test`` runs files on pytest-xdist workers (--dist
loadfile), and the session's cluster must have one user, who starts and stops it (conftest.py)."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from training.test_ddp import RUN as DDP_RUN
from training.test_ddp import read_val_row, validate_one_process

from support import FLICKR8K, HAS_FLICKR8K, REPO, TINY, compose_train
from support.cluster_commands import CPU_FORM, TINY_CPU, cpu_form
from support.coco_replica import write_karpathy_replica

pytestmark = pytest.mark.slow

TEMPLATE = REPO / "scripts" / "slurm_train.sbatch"
# The slurm launcher's config with what a CPU-only 2-node cluster needs: one CPU a task, no GPUs.
LAUNCH = [
    "hydra/launcher=slurm",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.gpus_per_node=null",
    "hydra.launcher.timeout_min=15",
]
CPU_DDP = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.precision=32-true"]


def _multirun(args: list[str], sweep_dir: Path, env: dict) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "captioning.training.train", "-m", *args, f"hydra.sweep.dir={sweep_dir}"]
    return subprocess.Popen(
        cmd, cwd=sweep_dir.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _finish(proc: subprocess.Popen, timeout: float = 420) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-4000:]
    return out


def _history(run_dir: Path) -> list[dict]:
    summary = json.loads((run_dir / "run.json").read_text())
    assert summary["finished"] is True
    return summary["history"]


def test_a_sweep_through_the_slurm_launcher_equals_the_basic_launchers(slurm: dict, tmp_path: Path) -> None:
    sweep = [*TINY, "trainer.max_epochs=1", "seed=0,1"]
    on_slurm = _multirun([*LAUNCH, *sweep], tmp_path / "slurm", slurm)
    basic = _multirun(sweep, tmp_path / "basic", slurm)  # Hydra's basic launcher: one job after the other
    _finish(on_slurm)
    _finish(basic)
    assert list((tmp_path / "slurm" / ".submitit").glob("*_1/*_submission.sh")) or list(
        (tmp_path / "slurm" / ".submitit").glob("*/*_submission.sh")
    )  # the jobs went through sbatch
    for job in ("0", "1"):
        assert _history(tmp_path / "slurm" / job) == _history(tmp_path / "basic" / job), job
    losses = [_history(tmp_path / "slurm" / job)[-1]["metrics"]["val/loss"] for job in ("0", "1")]
    assert losses[0] != losses[1]  # two seeds, two runs: not one run twice


def test_ddp_jobs_on_one_node_and_on_two_nodes_score_like_one_process(slurm: dict, tmp_path: Path) -> None:
    layouts = {
        "one_node": ["trainer.devices=2", "trainer.num_nodes=1"],
        "two_nodes": ["trainer.devices=1", "trainer.num_nodes=2"],
    }
    procs = {
        name: _multirun([*LAUNCH, *CPU_DDP, *DDP_RUN, *layout], tmp_path / name, slurm)
        for name, layout in layouts.items()
    }
    for name, proc in procs.items():
        _finish(proc)
        run_dir = tmp_path / name / "0"
        (script,) = (tmp_path / name / ".submitit").glob("*/*_submission.sh")
        nodes = 1 if name == "one_node" else 2
        assert (
            f"#SBATCH --nodes={nodes}" in script.read_text()
            and f"--ntasks-per-node={3 - nodes}" in script.read_text()
        )
        logs = "".join(p.read_text() for p in (tmp_path / name / ".submitit").rglob("*_log.err"))
        assert "MEMBER: 1/2" in logs and "MEMBER: 2/2" in logs, logs[-3000:]  # both ranks in one world
        ddp_scores = read_val_row(run_dir)  # the whole val split, gathered from both ranks
        single = validate_one_process(
            run_dir / "checkpoints" / "last.ckpt", compose_train(DDP_RUN, tmp_path / "single")
        )
        assert single == ddp_scores, name  # 7 images: rank 1's padding duplicate is not scored


# ----------------------------------------------------------------------------------- sbatch template

EVERY = 5  # last.ckpt every 5 steps
STEPS = 50  # 160 scenes x 5 captions / (batch 8 x 2 ranks), one epoch


def _job_state(job: str, env: dict) -> str:
    shown = subprocess.run(["scontrol", "show", "job", job, "-o"], env=env, capture_output=True, text=True)
    match = re.search(r"JobState=(\S+)", shown.stdout)
    return match.group(1) if match else "GONE"


def _wait_for(job: str, env: dict, states: set[str], timeout: float = 300) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        state = _job_state(job, env)
        if state in states:
            return state
        time.sleep(0.5)
    raise AssertionError(f"job {job} not in {states} within {timeout} s: {_job_state(job, env)}")


def _release(job: str, env: dict) -> None:
    """A requeued job waits ~2 minutes (SLURM's BeginTime) before it may start again: start it now.

    Not within the second its last start ended, though: slurmd revokes a job's credential when it ends and
    refuses a launch whose new credential is not from a later second ("Killing non-startable batch JobId:
    Job credential revoked", the job FAILED with exit 1 before its first line: this test's occasional failure
    on a finished job requeued at once). SLURM's own two minutes never meet it."""
    _wait_for(job, env, {"PENDING"})
    time.sleep(1.5)
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], env=env, check=True)


def _attempts(log: Path, steps: int = STEPS) -> list[list[int]]:
    """For each start of the job, the steps its progress lines name (rank 0 prints one per step)."""
    text = log.read_text() if log.is_file() else ""
    starts = text.split("slurm_train: job")[1:]
    return [[int(s) for s in re.findall(rf"^step (\d+)/{steps}", part, re.M)] for part in starts]


def _wait_for_step(log: Path, step: int, job: str, env: dict, attempt: int = 0, timeout: float = 300) -> None:
    """Until the latest start (or start number ``attempt + 1``, with ``attempt``) has reached ``step``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        attempts = _attempts(log)
        if len(attempts) > attempt and attempts[-1] and attempts[-1][-1] >= step:
            return
        assert _job_state(job, env) in {"PENDING", "RUNNING", "CONFIGURING"}, log.read_text()[-3000:]
        time.sleep(0.1)
    raise AssertionError(f"step {step} not reached within {timeout} s:\n{log.read_text()[-3000:]}")


# The template's tiny run: the documented commands' tiny CPU run (TINY_CPU), with a progress line at every
# step (the tests follow the steps in the job's log).
TEMPLATE_RUN = [
    *TINY_CPU.split(),
    "trainer.enable_progress_bar=false",
    "callbacks.progress_lines.every_n_steps=1",
]


def _submit_template(options: list[str], overrides: list[str], run_dir: Path, log: Path, env: dict) -> str:
    """scripts/slurm_train.sbatch submitted with sbatch ``options`` (one rank a node, one CPU each), its run
    folder ``run_dir`` and its output ``log``: the job id."""
    sbatch = ["sbatch", "--parsable", *options, "--ntasks-per-node=1", "--cpus-per-task=1", f"--output={log}"]
    return subprocess.run(
        [*sbatch, str(TEMPLATE), *overrides],
        env={**env, "RUN_DIR": str(run_dir)},
        cwd=log.parent,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_the_sbatch_template_survives_a_preemption_and_a_time_limit_warning_by_itself(
    slurm: dict, tmp_path: Path
) -> None:
    run_dir, log = tmp_path / "run", tmp_path / "slurm.out"
    overrides = [
        *TEMPLATE_RUN,
        "data.train.num_images=160",
        f"callbacks.last_checkpoint.every_n_train_steps={EVERY}",
    ]
    job = _submit_template(["--nodes=2"], overrides, run_dir, log, slurm)

    first = random.randint(3, 20)
    second = random.randint(first + 5, STEPS - 10)
    redone = []
    for step, interrupt in (
        (first, ["scontrol", "requeue", job]),  # a preemption: SIGTERM, and srun's SIGKILL, with no warning
        (second, ["scancel", "--signal=USR1", job]),  # the time-limit warning (--signal=USR1@300)
    ):
        _wait_for_step(log, step, job, slurm)
        starts = len(_attempts(log))
        subprocess.run(interrupt, env=slurm, check=True)
        _release(job, slurm)
        _wait_for_step(log, 0, job, slurm, attempt=starts)  # the next start's first step
        reached, resumed = (_attempts(log)[i] for i in (-2, -1))
        resumed_from = resumed[0] - 1
        redone.append(max(0, max(reached) - resumed_from))  # steps the restart trains a second time
    assert _wait_for(job, slurm, {"COMPLETED", "FAILED", "CANCELLED"}) == "COMPLETED", log.read_text()[-4000:]

    text = log.read_text()
    print(f"interrupted at steps {first}, {second}; steps trained again after each: {redone}")
    assert redone[0] <= EVERY, (first, redone)  # a preemption loses at most one checkpoint interval
    assert redone[1] == 0, (second, redone)  # the warning saves where the run stops
    assert re.search(rf"SLURM warning signal: last.ckpt saved at step \d+; requeueing job {job}\n", text)
    assert "not requeued" not in text
    for count in (1, 2):
        assert f"SLURM job {job} restarted (SLURM_RESTART_COUNT={count}): ckpt_path=auto" in text
    assert "already holds checkpoints" not in text
    assert "SLURM auto-requeueing enabled" not in text  # Lightning's handler is off: one owner
    final = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert final["global_step"] == STEPS and json.loads((run_dir / "run.json").read_text())["finished"]

    # a finished job requeued once more starts, finds its run.json, and trains nothing
    files = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*.ckpt")}
    subprocess.run(["scontrol", "requeue", job], env=slurm, check=True)
    _release(job, slurm)
    state = _wait_for(job, slurm, {"COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL"})
    shown = subprocess.run(["scontrol", "show", "job", job, "-o"], env=slurm, capture_output=True, text=True)
    assert state == "COMPLETED", f"{shown.stdout}\n{log.read_text()[-3000:]}"  # SLURM's reason, then the log
    assert f"{run_dir} holds a finished run (run.json)" in log.read_text()
    assert {p: p.stat().st_mtime_ns for p in run_dir.rglob("*.ckpt")} == files


def test_a_run_longer_than_its_time_limit_saves_on_the_warning_requeues_itself_and_finishes(
    slurm: dict, tmp_path: Path
) -> None:
    """A real --time: SLURM itself sends the warning (no scancel). Its time checks run every ~30 s, so
    --signal=USR1@60 before a 2-minute limit arrives 30 to 60 s into the job (measured: a warning can come
    up to 30 s before the margin asked for; a warning during start-up, before the callback handles it,
    ends the process: SIGUSR1's default), and the limit itself is enforced up to 30 s late (OverTimeLimit=0,
    KillWait=30): the warning always comes first. The first start sleeps 9 s after each step
    (support/slow_start.py), so it would need 15 x 9 s, past the limit; the restart trains at full speed
    and ends before its own warning. The only shortcut: the requeued job is started at once rather than
    after SLURM's ~2 minutes of BeginTime."""
    run_dir, log, steps = tmp_path / "run", tmp_path / "slurm.out", 15  # one epoch of 15 tiny steps
    overrides = [
        *TEMPLATE_RUN,
        "+callbacks.slow_start._target_=support.slow_start.SlowFirstStart",
        "+callbacks.slow_start.seconds=9",
        "allowed_targets=[support.slow_start]",  # the tests' own callback (config_safety.py)
    ]
    limits = ["--time=2", "--signal=USR1@60"]  # overriding the template's --time=24:00:00 --signal=USR1@300
    job = _submit_template(["--nodes=1", *limits], overrides, run_dir, log, slurm)

    ended = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"}
    _wait_for(job, slurm, {"RUNNING", *ended})
    # requeued by the run itself (PENDING again), not ended by the limit (TIMEOUT)
    assert _wait_for(job, slurm, {"PENDING", *ended}, timeout=400) == "PENDING", log.read_text()[-4000:]
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], env=slurm, check=True)
    assert _wait_for(job, slurm, ended, timeout=400) == "COMPLETED", log.read_text()[-4000:]

    text = log.read_text()
    warnings = re.findall(
        rf"SLURM warning signal: last.ckpt saved at step (\d+); requeueing job {job}\n", text
    )
    assert len(warnings) == 1, text[-4000:]  # warned once, by SLURM, and the restart ended before its own
    warned_at = int(warnings[0])
    first, restarted = _attempts(log, steps)  # exactly two starts
    # the saving step prints no progress line (the save comes first, then the wait for SIGTERM)
    lost = max([*first, warned_at]) - (restarted[0] - 1)  # steps the restart trains a second time
    print(f"warned at step {warned_at} of {steps}; steps trained again after the restart: {lost}")
    assert max(first) <= warned_at < steps  # the limit cut the first start short
    assert restarted[0] == warned_at + 1 and restarted[-1] == steps  # on from the save: nothing lost
    assert "DUE TO TIME LIMIT" not in text  # requeued before the limit, never killed by it
    shown = subprocess.run(["scontrol", "show", "job", job, "-o"], env=slurm, capture_output=True, text=True)
    assert " Restarts=1 " in shown.stdout, shown.stdout
    final = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert final["global_step"] == steps and json.loads((run_dir / "run.json").read_text())["finished"]


# ------------------------------------------------------------------------ the docs' cluster commands


def _job_env(code: str, tmp_path: Path, slurm: dict) -> dict:
    """The data a documented command names, found as a person's environment would give it."""
    env = dict(slurm)
    if "data=flickr8k" in code:
        if not HAS_FLICKR8K:
            pytest.skip(f"Flickr8k not found at {FLICKR8K} (set FLICKR8K_ROOT)")
        env["FLICKR8K_ROOT"] = str(FLICKR8K)
    if "experiment=coco" in code:  # the Karpathy-format replica (tests/support/coco_replica.py)
        json_path = write_karpathy_replica(tmp_path / "coco")
        env.update(COCO_ROOT=str(tmp_path / "coco"), KARPATHY_JSON=str(json_path))
    return env


@pytest.mark.parametrize("name", sorted(CPU_FORM))
def test_a_documented_cluster_command_runs_as_written(name: str, slurm: dict, tmp_path: Path) -> None:
    """The block as the docs write it, with only CPU_FORM's substitutions, run from a folder that has the
    clone's scripts/ and this Python's .venv (the docs' paths are relative to the clone); asserts what the
    docs say it produces."""
    code = cpu_form(name)
    env = _job_env(code, tmp_path, slurm)
    (tmp_path / "scripts").symlink_to(REPO / "scripts")
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parent.parent)  # `source .venv/bin/activate`
    if code.startswith("#!"):  # a batch script: submitted as the docs' reader would
        (tmp_path / "job.sh").write_text(code + "\n")
        cmd = ["sbatch", "--parsable", "job.sh"]
    else:
        cmd = ["bash", "-e", "-c", code]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{name}:\n{code}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"

    if name == "sweep":  # 2 decoders x 3 seeds, one job array, each job in its folder
        sweep_dir = tmp_path / "multirun" / "flickr8k_soft_vs_gumbel"
        (script,) = (sweep_dir / ".submitit").glob("*/*_submission.sh")  # .submitit/<array id>/
        header = set(re.findall(r"^#SBATCH (\S+)", script.read_text(), re.M))
        # the header docs/guides/sweeps.md shows, in its CPU form (no GPUs, one task and CPU, partition debug)
        shown = {
            "--array=0-5%6",
            "--nodes=1",
            "--ntasks-per-node=1",
            "--cpus-per-task=1",
            "--partition=debug",
        }
        assert shown | {"--time=720"} <= header and not any("gpu" in h for h in header), header
        ended = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}
        for job in range(6):  # submitit has its results before SLURM has the job's end: wait for both
            task = f"{script.parent.name}_{job}"
            state = _wait_for(task, env, ended)
            errors = "".join(p.read_text() for p in script.parent.parent.glob(f"{task}/*_log.err"))
            assert state == "COMPLETED", errors[-3000:]
            assert _history(sweep_dir / str(job)), job
        return
    job = done.stdout.strip().split()[-1]  # "Submitted batch job N" or --parsable's "N"
    state = _wait_for(job, env, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, timeout=600)
    log = (tmp_path / f"slurm-{job}.out").read_text()
    assert state == "COMPLETED", log[-4000:]
    assert "MEMBER: 1/2" in log and "MEMBER: 2/2" in log, log[-3000:]  # two nodes, one DDP world
    run_dir = tmp_path / "outputs" / "slurm" / job  # the run folder both pages name
    assert _history(run_dir)
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] > 0
    if "logger=[csv,wandb]" in code:  # the W&B run, offline as the script asks, in the run folder
        assert list((run_dir / "wandb").glob("offline-run-*")), sorted(p.name for p in run_dir.iterdir())
