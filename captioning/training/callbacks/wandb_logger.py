"""What the W&B callbacks share: finding the run's WandbLogger, and keeping W&B's staging in the run folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytorch_lightning as pl
from pytorch_lightning.loggers import WandbLogger


def find_wandb_logger(trainer: pl.Trainer) -> WandbLogger | None:
    return next((lg for lg in trainer.loggers if isinstance(lg, WandbLogger)), None)


def stage_inside(save_dir: str | Path) -> Path:
    """Point W&B's staging at ``save_dir``/wandb/data unless WANDB_DATA_DIR is set; returns the folder."""
    folder = Path(os.environ.setdefault("WANDB_DATA_DIR", str(Path(save_dir) / "wandb" / "data")))
    folder.mkdir(parents=True, exist_ok=True)
    return folder
