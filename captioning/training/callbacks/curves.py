"""TrainingCurves: at the end of a run, draw its train/val curves (captioning.training.curves) into
curves.png beside the CSV logger's metrics.csv; a run without a CSV logger draws nothing."""

from __future__ import annotations

import pytorch_lightning as pl
from pytorch_lightning.loggers import CSVLogger


class TrainingCurves(pl.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.path = None

    def _draw(self, trainer: pl.Trainer) -> None:
        if not trainer.is_global_zero:
            return
        csv_loggers = [lg for lg in trainer.loggers if isinstance(lg, CSVLogger)]
        if not csv_loggers:
            return
        from captioning.training.curves import plot_curves

        logger = csv_loggers[0]
        logger.save()  # flush the last rows first
        try:
            self.path = plot_curves(logger.log_dir)
        except (FileNotFoundError, ValueError) as err:  # nothing logged yet: say so, never fail the run
            print(f"training curves not drawn: {err}", flush=True)
            return
        print(f"training curves: {self.path}", flush=True)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._draw(trainer)

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self._draw(trainer)  # a stopped or crashed run keeps its curves too
