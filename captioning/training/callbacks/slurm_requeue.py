"""SlurmRequeue: the one owner of SLURM's signals (captioning/training/requeue.py tells the whole story).

SLURM sends the warning signal (``--signal=USR1@SECONDS``; submitit's launcher sends USR2) to every task
of the job some time before its limit. Global rank 0 answers with ``scontrol requeue``: SLURM then stops
the job with SIGTERM (Lightning stops after the batch, ``PeriodicCheckpoint`` saves ``last.ckpt``) and
starts it again, and the restarted job resumes from that checkpoint. The other ranks only take note.

The handler runs ``scontrol`` and nothing else: the checkpoint is written where Lightning's SIGTERM stop
puts it, after a whole batch, never from inside a signal handler in the middle of an optimizer step.
Outside SLURM (no SLURM_JOB_ID) the callback does nothing.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from types import FrameType

import pytorch_lightning as pl
from lightning_fabric.plugins.environments import SLURMEnvironment

from captioning.training.requeue import slurm_job_id


class SlurmRequeue(pl.Callback):
    def __init__(self, signals: list[str] | tuple[str, ...] = ("SIGUSR1", "SIGUSR2")) -> None:
        """``signals``: the names of the warning signals to answer (SIGUSR1: ``--signal`` of the sbatch
        template; SIGUSR2: submitit's). Unknown names are refused here, when the callback is built."""
        unknown = [
            name for name in signals if not isinstance(getattr(signal, str(name), None), signal.Signals)
        ]
        if unknown:
            raise ValueError(f"signals: {unknown} are not signal names; expected e.g. SIGUSR1, SIGUSR2")
        self.signals = [signal.Signals[str(name)] for name in signals]
        self.requeued = False
        self._previous: dict[signal.Signals, object] = {}
        self._global_zero = False

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit" or slurm_job_id() is None:
            return
        environment = trainer._accelerator_connector.cluster_environment  # what the signal connector reads
        if isinstance(environment, SLURMEnvironment):
            # Lightning's auto-requeue off (requeue.py says why): this callback owns the warning signal.
            environment._auto_requeue = False
        self._global_zero = trainer.is_global_zero
        for signum in self.signals:  # after submitit's handlers: its USR2 checkpointing is replaced too
            self._previous[signum] = signal.signal(signum, self._on_warning)

    def _on_warning(self, signum: int, frame: FrameType | None) -> None:
        if not self._global_zero or self.requeued:
            return
        self.requeued = True
        job = slurm_job_id()
        done = subprocess.run(["scontrol", "requeue", str(job)], capture_output=True, text=True)
        outcome = "requeued" if done.returncode == 0 else f"scontrol requeue failed: {done.stderr.strip()}"
        print(
            f"SLURM warning signal {signal.Signals(signum).name}: job {job} {outcome}; "
            "its SIGTERM saves last.ckpt and the job resumes from it",
            file=sys.stderr,
            flush=True,
        )

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
