"""A SLURM job that is requeued (its time-limit warning signal, or a preemption's SIGTERM) resumes from its
own last.ckpt without ckpt_path, finishes at the uninterrupted run's step on its batches with its weights,
and is never trained again.

``scontrol`` is a stand-in here (a script on PATH that records its arguments and sends the SIGTERM SLURM
would); tests/cluster/ does the same on a real SLURM cluster."""

from __future__ import annotations

import json
import os
import random
import re
import signal
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from omegaconf import OmegaConf, open_dict

from captioning.training.callbacks.slurm_requeue import SlurmRequeue
from captioning.training.requeue import resume_requeued, slurm_job_id
from captioning.training.train import StoppedBySignal, train

from support import TINY, compose_train

# 24 scenes x 5 captions / batch 8 = 15 steps an epoch, two epochs: 30 steps, validation after each epoch.
RUN = [*TINY, "trainer.max_epochs=2", "callbacks.last_checkpoint.every_n_train_steps=7"]
STEPS_PER_EPOCH = 15
STEPS = 2 * STEPS_PER_EPOCH


class WarnAt(pl.Callback):
    """SLURM's time-limit warning (SIGUSR1) to this process at the end of step ``step``."""

    step = -1

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if trainer.global_step == WarnAt.step:
            os.kill(os.getpid(), signal.SIGUSR1)


def _two_steps(lo: int, hi: int) -> list[int]:
    """Two random steps in [lo, hi) at least 2 apart: a resumed run starts one step after its warning's."""
    draw = random.Random()  # not the run's seeded generator: other steps on every test run
    first = draw.randrange(lo, hi - 2)
    return [first, draw.randrange(first + 2, hi)]


def test_requeued_twice_at_random_steps_the_job_resumes_by_itself_and_ends_where_an_uninterrupted_run_does(
    tmp_path: Path, fake_slurm: Path, monkeypatch
) -> None:
    steps = _two_steps(2, STEPS - 1)  # two warnings, anywhere but the last step
    run_dir = tmp_path / "requeued"
    for restart, step in enumerate(steps):
        monkeypatch.setenv("SLURM_RESTART_COUNT", str(restart))
        cfg = compose_train(RUN, run_dir)  # the job's own command: no ckpt_path
        with open_dict(cfg):
            cfg.callbacks.warn_at = OmegaConf.create({"_target_": f"{__name__}.WarnAt"})
            cfg.allowed_targets = [__name__]  # this test module's class (config_safety.py)
        WarnAt.step = step
        with pytest.raises(StoppedBySignal):
            train(cfg)
        saved = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
        # the warning arrives at step `step`'s end: saved there, or at the next batch's end at the latest,
        # one batch later still when that batch is an epoch's last (slurm_requeue.py: saved after the epoch)
        latest = step + 1 if (step + 1) % STEPS_PER_EPOCH else step + 2
        assert step <= saved["global_step"] <= latest, (steps, saved["global_step"])
    assert fake_slurm.read_text().split("\n")[:-1] == ["requeue 4242", "requeue 4242"]

    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    best = Path(train(compose_train(RUN, run_dir)))  # the third start runs to the end
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == STEPS
    assert json.loads((run_dir / "run.json").read_text())["finished"] is True

    monkeypatch.delenv("SLURM_RESTART_COUNT")
    monkeypatch.delenv("SLURM_JOB_ID")
    plain = tmp_path / "uninterrupted"
    train(compose_train(RUN, plain))
    assert torch.load(plain / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == STEPS

    # a finished job that SLURM starts once more (a requeue after its end) is not trained again
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "3")
    files = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*") if p.is_file()}
    assert train(compose_train(RUN, run_dir)) == str(best)
    assert {p: p.stat().st_mtime_ns for p in run_dir.rglob("*") if p.is_file()} == files


def test_a_refused_requeue_is_said_and_training_goes_on_to_the_end(
    tmp_path: Path, fake_slurm: Path, monkeypatch, capfd
) -> None:
    # scontrol refuses (a job without --requeue, a cluster that forbids it): the warning's save is kept, the
    # run says so and trains on; the line saying what it saves comes before the requeue is asked for.
    fake_slurm.parent.joinpath("bin", "scontrol").write_text(
        f'#!/bin/sh\necho "$@" >> {fake_slurm}\necho "Requested operation is disabled" >&2\nexit 1\n'
    )
    cfg = compose_train(RUN, tmp_path / "run")
    with open_dict(cfg):
        cfg.callbacks.warn_at = OmegaConf.create({"_target_": f"{__name__}.WarnAt"})
        cfg.allowed_targets = [__name__]
    WarnAt.step = 5
    train(cfg)
    assert fake_slurm.read_text() == "requeue 4242\n"
    said = capfd.readouterr().err
    saved = re.search(r"SLURM warning signal: last.ckpt saved at step [56]; requeueing job 4242\n", said)
    refused = said.find("job 4242 not requeued, training goes on: Requested operation is disabled\n")
    assert saved and saved.start() < refused, said[-2000:]
    assert (
        torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == STEPS
    )
    assert json.loads((tmp_path / "run" / "run.json").read_text())["finished"] is True


def test_without_a_restart_or_with_an_explicit_ckpt_path_the_config_is_left_alone(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    cfg = compose_train(TINY, tmp_path)
    resume_requeued(cfg)
    assert cfg.ckpt_path is None  # first start: a fresh run, whose folder must be new
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    resume_requeued(cfg)
    assert cfg.ckpt_path == "auto"
    cfg.ckpt_path = "/some/where.ckpt"
    resume_requeued(cfg)
    assert cfg.ckpt_path == "/some/where.ckpt"


def test_the_job_id_scontrol_takes(monkeypatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "101")
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    assert slurm_job_id() == "101"
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "100")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    assert slurm_job_id() == "100_1"  # a task of a job array (submitit's sweeps)


def test_unknown_signal_names_are_refused_when_built() -> None:
    with pytest.raises(ValueError, match=r"signals: \['SIGBOGUS'\] are not signal names"):
        SlurmRequeue(signals=["SIGUSR1", "SIGBOGUS"])


class Draws(pl.Callback):
    """Per step: the images of its batch."""

    seen: dict[int, tuple] = {}

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module, batch, batch_idx: int) -> None:
        Draws.seen[trainer.global_step] = (tuple(batch["image_ids"]),)


class PreemptAt(pl.Callback):
    """A preemption with no warning (SIGTERM) at the end of step ``step``: Lightning stops after it, after
    the epoch's validation and end when the step is an epoch's last."""

    step = -1

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if trainer.global_step == PreemptAt.step:
            os.kill(os.getpid(), signal.SIGTERM)


def _random_step(lo: int, hi: int) -> int:
    return random.Random().randrange(lo, hi)  # not the run's seeded generator: other steps on every test run


# (how the job is interrupted, at which step) twice; steps 15 and 30 end the two epochs
INTERRUPTIONS = {
    "warned at random steps": lambda: [("warn", s) for s in _two_steps(2, STEPS - 1)],
    # SIGTERM at the epoch's last step: last.ckpt is written after its validation, and the job resumes there
    "preempted right after a validation": lambda: [("term", 15), ("warn", _random_step(16, STEPS - 1))],
    # the same with no validation after epoch 1 (every second epoch): saved at the epoch's end
    "preempted at an epoch's end": lambda: [("term", 15), ("warn", _random_step(16, STEPS - 1))],
    # the same in a run counted in steps: saved at the epoch's last batch (periodic_checkpoint.py)
    "preempted at an epoch's end, max_steps": lambda: [("term", 15), ("warn", _random_step(16, STEPS - 1))],
    # the warning at an epoch's last batch is acted on after the epoch (slurm_requeue.py)
    "warned at an epoch's last batch": lambda: [("warn", 14), ("term", _random_step(17, STEPS - 1))],
}
EXTRA = {
    "preempted at an epoch's end": ["trainer.check_val_every_n_epoch=2"],
    "preempted at an epoch's end, max_steps": [
        "trainer.check_val_every_n_epoch=2",
        f"trainer.max_steps={STEPS}",
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(INTERRUPTIONS))
def test_requeued_twice_the_run_ends_with_the_weights_of_an_uninterrupted_run(
    case: str, tmp_path: Path, fake_slurm: Path, monkeypatch
) -> None:
    """The resumed epoch goes on with the batches the uninterrupted run drew (data/resumable.py), not a new
    shuffle that repeats some images and skips others, and with its random draws (dropout masks): the
    generators' states travel in the checkpoint (callbacks/exact_resume.py) and nothing draws from them
    at moments the uninterrupted run did not (a loader's iterator has its own generator). The job ends with
    the uninterrupted run's step count, parameters, buffers and optimizer state, bit for bit."""
    interruptions = INTERRUPTIONS[case]()
    run = [*RUN, *EXTRA.get(case, [])]
    runs, ends = {}, {}
    for name in ("requeued", "uninterrupted"):
        Draws.seen = {}
        run_dir = tmp_path / name
        if name == "requeued":
            for restart, (kind, step) in enumerate(interruptions):
                monkeypatch.setenv("SLURM_RESTART_COUNT", str(restart))
                with pytest.raises(StoppedBySignal):
                    train(_with_callbacks(compose_train(run, run_dir), **{kind: step}))
            monkeypatch.setenv("SLURM_RESTART_COUNT", str(len(interruptions)))
        else:
            monkeypatch.delenv("SLURM_RESTART_COUNT")
            monkeypatch.delenv("SLURM_JOB_ID")
        train(_with_callbacks(compose_train(run, run_dir)))
        runs[name] = dict(Draws.seen)
        ends[name] = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    requeued, uninterrupted = runs["requeued"], runs["uninterrupted"]
    assert sorted(uninterrupted) == list(range(STEPS))
    assert sorted(requeued) == list(range(STEPS))  # every step drawn (a lost step is drawn again)
    for step in range(STEPS):
        assert requeued[step][0] == uninterrupted[step][0], (step, interruptions)  # same images, same order

    mine, theirs = ends["requeued"], ends["uninterrupted"]
    assert (mine["global_step"], mine["epoch"]) == (theirs["global_step"], theirs["epoch"]) == (STEPS, 1)
    assert mine["state_dict"].keys() == theirs["state_dict"].keys()
    for key, value in theirs["state_dict"].items():  # every parameter and buffer
        assert torch.equal(mine["state_dict"][key], value), (key, interruptions)
    _assert_equal(mine["optimizer_states"], theirs["optimizer_states"], "optimizer_states", interruptions)
    _assert_equal(mine["lr_schedulers"], theirs["lr_schedulers"], "lr_schedulers", interruptions)


def _assert_equal(mine, theirs, where: str, interruptions) -> None:
    """``mine`` and ``theirs`` hold the same keys and items, tensors ``torch.equal``."""
    if isinstance(theirs, torch.Tensor):
        assert isinstance(mine, torch.Tensor) and torch.equal(mine, theirs), (where, interruptions)
    elif isinstance(theirs, dict):
        assert mine.keys() == theirs.keys(), (where, interruptions)
        for key in theirs:
            _assert_equal(mine[key], theirs[key], f"{where}.{key}", interruptions)
    elif isinstance(theirs, (list, tuple)):
        assert len(mine) == len(theirs), (where, interruptions)
        for i, (a, b) in enumerate(zip(mine, theirs)):
            _assert_equal(a, b, f"{where}[{i}]", interruptions)
    else:
        assert mine == theirs, (where, interruptions)


def _with_callbacks(cfg, warn: int | None = None, term: int | None = None):
    with open_dict(cfg):
        cfg.callbacks.draws = OmegaConf.create({"_target_": f"{__name__}.Draws"})
        if warn is not None:
            cfg.callbacks.warn_at = OmegaConf.create({"_target_": f"{__name__}.WarnAt"})
        if term is not None:
            cfg.callbacks.preempt_at = OmegaConf.create({"_target_": f"{__name__}.PreemptAt"})
        cfg.allowed_targets = [__name__]  # this test module's classes (config_safety.py)
    WarnAt.step = -1 if warn is None else warn
    PreemptAt.step = -1 if term is None else term
    return cfg
