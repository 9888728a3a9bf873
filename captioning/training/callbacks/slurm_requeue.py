"""SlurmRequeue: the one owner of SLURM's signals (captioning/training/requeue.py tells the whole story).

SLURM sends the warning signal (``--signal=USR1@SECONDS``; submitit's launcher sends USR2) to every task
of the job some time before its limit. At the end of the next training batch (all ranks agree on which:
the decision is reduced over them) ``last.ckpt`` is saved where the run is, then global rank 0 runs
``scontrol requeue`` and every rank waits to be stopped: SLURM ends the job and starts it again, and the
restarted job resumes from that checkpoint with nothing trained twice.

Why save on the warning and not on the SIGTERM that ends the job: under ``srun`` (the sbatch template,
submitit), srun itself receives that SIGTERM and answers it with SIGKILL to the tasks, so nothing can be
saved then. A preemption without warning therefore loses the work since the last periodic save
(``callbacks.last_checkpoint.every_n_minutes``). Outside SLURM (no SLURM_JOB_ID) the callback does nothing.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from types import FrameType

import pytorch_lightning as pl
from lightning_fabric.plugins.environments import SLURMEnvironment

from captioning.training.callbacks.periodic_checkpoint import PeriodicCheckpoint
from captioning.training.requeue import slurm_job_id


class SlurmRequeue(pl.Callback):
    def __init__(
        self, signals: list[str] | tuple[str, ...] = ("SIGUSR1", "SIGUSR2"), wait_s: float = 600.0
    ) -> None:
        """``signals``: the names of the warning signals to answer (SIGUSR1: ``--signal`` of the sbatch
        template; SIGUSR2: submitit's). ``wait_s``: how long the ranks wait, once requeued, for SLURM to
        stop them (it does within seconds); should it not, training goes on."""
        unknown = [
            name for name in signals if not isinstance(getattr(signal, str(name), None), signal.Signals)
        ]
        if unknown:
            raise ValueError(f"signals: {unknown} are not signal names; expected e.g. SIGUSR1, SIGUSR2")
        self.signals = [signal.Signals[str(name)] for name in signals]
        self.wait_s = wait_s
        self.warned = False  # this process got the warning signal
        self.requeued = False
        self._active = False
        self._previous: dict[signal.Signals, object] = {}

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit" or slurm_job_id() is None:
            return
        environment = trainer._accelerator_connector.cluster_environment  # what the signal connector reads
        if isinstance(environment, SLURMEnvironment):
            environment.auto_requeue = False  # Lightning's auto-requeue off (requeue.py says why)
        self._active = True
        for signum in self.signals:  # after submitit's handlers: its USR2 checkpointing is replaced too
            self._previous[signum] = signal.signal(signum, self._on_warning)

    def _on_warning(self, signum: int, frame: FrameType | None) -> None:
        self.warned = True  # acted on at the end of the batch: a handler may run in the middle of a step

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if not self._active or self.requeued:
            return
        # any rank warned: every rank takes part in this reduction at every batch, and in the save below
        if not trainer.strategy.reduce_boolean_decision(self.warned, all=False):
            return
        if trainer.fit_loop.epoch_loop.batch_progress.is_last_batch:
            # the epoch's last batch: acted on at the next batch's end, after the epoch's validation and its
            # end (a save between them resumes into the next epoch without starting it: periodic_checkpoint.py)
            return
        periodic = [c for c in trainer.checkpoint_callbacks if isinstance(c, PeriodicCheckpoint)]
        for callback in periodic:
            callback._save_last_checkpoint(trainer, callback._monitor_candidates(trainer))
        self.requeued = True
        ok = True
        if trainer.is_global_zero:
            job = slurm_job_id()
            # Said before the requeue: the requeue's SIGTERM and srun's SIGKILL can end the step before srun
            # has forwarded a line written after it (a loaded machine lost it from the job's output).
            print(
                f"SLURM warning signal: last.ckpt saved at step {trainer.global_step}; requeueing job {job}",
                file=sys.stderr,
                flush=True,
            )
            done = subprocess.run(["scontrol", "requeue", str(job)], capture_output=True, text=True)
            ok = done.returncode == 0
            if not ok:
                print(
                    f"SLURM warning signal: job {job} not requeued, training goes on: {done.stderr.strip()}",
                    file=sys.stderr,
                    flush=True,
                )
        if trainer.strategy.reduce_boolean_decision(ok, all=True):
            self._wait_to_be_stopped(trainer, periodic)

    def _wait_to_be_stopped(self, trainer: pl.Trainer, periodic: list[PeriodicCheckpoint]) -> None:
        """Wait up to ``wait_s`` for SLURM's SIGTERM (and srun's SIGKILL), which end the process here. With
        several processes the periodic checkpoint's handler notes the SIGTERM and they stop at a batch's end
        together; they also leave this wait together, on any process's note or at the deadline (reduced over
        them): one that left alone would wait in the next collective for the others, past the strategy's
        timeout (``wait_s`` is longer), and crash the run."""
        end = time.monotonic() + self.wait_s
        while True:
            noticed = trainer.received_sigterm or any(c.sigterm_noticed for c in periodic)
            if trainer.strategy.reduce_boolean_decision(noticed or time.monotonic() >= end, all=False):
                return
            time.sleep(0.2)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        for signum, handler in self._previous.items():
            # Training is over: nothing is left to save. SLURM sends its warning once, at a fixed time before
            # the limit; arriving now, under the default action it would kill the test split or the run's
            # final writes and end a finished job FAILED. Ignored instead (SIGTERM still ends the job).
            signal.signal(signum, signal.SIG_IGN if handler in (signal.SIG_DFL, None) else handler)
        self._previous.clear()
        self._active = False
