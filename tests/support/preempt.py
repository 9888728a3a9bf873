"""SignalAt: a callback for runs in another process (a DDP run from the entry point), named in a config
as ``support.preempt.SignalAt`` with ``allowed_targets=[support]`` and ``tests/`` on PYTHONPATH.

It writes each step's images to ``<draws>.rank<R>`` (one JSON line a step, with a fingerprint of the
process's torch generator state as the step starts: ``read_streams``) and sends ``signal`` to global
rank ``rank`` (default 0) at the end of step ``step``: SIGUSR1, SLURM's time-limit warning (SlurmRequeue
acts on it on every rank), or SIGTERM, a preemption (one rank's alone: a process the scheduler signalled
first, or the only one a user killed)."""

from __future__ import annotations

import json
import os
import signal
import zlib

import pytorch_lightning as pl
import torch


class SignalAt(pl.Callback):
    def __init__(
        self, step: int = -1, draws: str = "", signal: str = "SIGUSR1", rank: int = 0, val_batch: int = -1
    ) -> None:
        """``val_batch`` >= 0: the signal goes at the end of that batch of the first validation after step
        ``step`` (the sanity check's excepted) instead of at the end of the step."""
        self.step, self.draws, self.signal, self.rank, self.val_batch = step, draws, signal, rank, val_batch
        self._sent = False

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module, batch, batch_idx: int) -> None:
        if self.draws:
            with open(f"{self.draws}.rank{trainer.global_rank}", "a") as out:
                state = zlib.crc32(torch.get_rng_state().numpy().tobytes())  # reads, draws nothing
                out.write(json.dumps([trainer.global_step, list(batch["image_ids"]), state]) + "\n")

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if trainer.global_step == self.step and trainer.global_rank == self.rank and self.val_batch < 0:
            os.kill(os.getpid(), signal.Signals[self.signal])

    def on_validation_batch_end(
        self, trainer: pl.Trainer, pl_module, outputs, batch, batch_idx: int, *_
    ) -> None:
        now = not trainer.sanity_checking and trainer.global_step >= self.step and batch_idx == self.val_batch
        if now and trainer.global_rank == self.rank and not self._sent:
            self._sent = True  # once: the first validation after the step
            os.kill(os.getpid(), signal.Signals[self.signal])


def _steps(draws: str, rank: int) -> dict[int, tuple[list, int]]:
    """Step -> (its batch's images, the generator's fingerprint) on ``rank``; a step drawn again after a
    resume: its last drawing."""
    with open(f"{draws}.rank{rank}") as lines:
        return {step: (ids, state) for step, ids, state in (json.loads(line) for line in lines)}


def read_draws(draws: str, rank: int) -> dict[int, list]:
    """Step -> the images of its batch on ``rank`` (a step drawn again after a resume: its last drawing)."""
    return {step: ids for step, (ids, _) in _steps(draws, rank).items()}


def read_streams(draws: str, rank: int) -> dict[int, int]:
    """Step -> the fingerprint of ``rank``'s torch generator state as the step started."""
    return {step: state for step, (_, state) in _steps(draws, rank).items()}
