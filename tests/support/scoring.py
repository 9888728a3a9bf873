"""FailScoringOn: a callback for DDP runs in another process (named in a config as
``support.scoring.FailScoringOn`` with ``allowed_targets=[support]`` and ``tests/`` on PYTHONPATH) that makes
the validation scorer raise on global rank ``rank``: on rank 0 the run must stop with that error on every
process, not hang; on any other rank nothing may change, since only rank 0 scores."""

from __future__ import annotations

import pytorch_lightning as pl

import captioning.training.lit_module as lit_module


class FailScoringOn(pl.Callback):
    def __init__(self, rank: int = 0) -> None:
        self.rank = rank

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if trainer.global_rank != self.rank:
            return

        def broken(*args, **kwargs):
            raise RuntimeError(f"scorer broken on rank {trainer.global_rank} (FailScoringOn)")

        lit_module.score_captions = broken  # the name the module's scoring calls
