"""SlowFirstStart: a tiny run made longer than its SLURM time limit (tests/cluster/test_slurm.py).

A callback the cluster tests add with ``+callbacks.slow_start=...`` (and ``allowed_targets=[support.slow_start]``):
after every training batch of the job's first start it sleeps ``seconds``, so a run of seconds outlasts
a one-minute ``--time``. A restart (``SLURM_RESTART_COUNT > 0``) trains at full speed: SLURM warns every
start of a job at the same point before its limit, so a restart as slow would be warned and requeued again.
"""

from __future__ import annotations

import time

import pytorch_lightning as pl

from captioning.training.requeue import restart_count


class SlowFirstStart(pl.Callback):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if restart_count() == 0:
            time.sleep(self.seconds)
