"""WandbRunSummary: what a W&B run page should say at a glance, which Lightning does not log.

* the **best** value of the checkpoint callback's monitored metric (``best/val/CIDEr``; ``best/val/scene_score`` on synthetic scenes; and the metric's
  own summary set to its max/min by ``define_metric``), where W&B would otherwise show the last value;
* the parameter counts (``params/total``, ``params/trainable``) in the summary and the config;
* W&B's artifact staging folder (``WANDB_DATA_DIR``, unless the user set it) inside the run's output
  folder, so the table of overlays and everything else ``wandb sync`` needs travels with the run folder
  instead of sitting under the home directory of the machine that trained.
"""

from __future__ import annotations

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint

from captioning.training.callbacks.wandb_logger import find_wandb_logger, stage_inside


class WandbRunSummary(pl.Callback):
    def _monitor(self, trainer: pl.Trainer) -> ModelCheckpoint | None:
        return next((cb for cb in trainer.checkpoint_callbacks if getattr(cb, "monitor", None)), None)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        logger = find_wandb_logger(trainer)
        if logger is None or not trainer.is_global_zero:
            return
        stage_inside(logger.save_dir or trainer.default_root_dir)
        params = {
            "total": sum(p.numel() for p in pl_module.parameters()),
            "trainable": sum(p.numel() for p in pl_module.parameters() if p.requires_grad),
        }
        run = logger.experiment
        run.config.update({"params": params}, allow_val_change=True)
        run.summary.update({f"params/{k}": v for k, v in params.items()})
        checkpoint = self._monitor(trainer)
        if checkpoint is not None:
            run.define_metric(checkpoint.monitor, summary="max" if checkpoint.mode == "max" else "min")

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        logger, checkpoint = find_wandb_logger(trainer), self._monitor(trainer)
        if logger is None or checkpoint is None or trainer.sanity_checking or not trainer.is_global_zero:
            return
        value = trainer.callback_metrics.get(checkpoint.monitor)
        if value is None:
            return
        key = f"best/{checkpoint.monitor}"
        best = logger.experiment.summary.get(key)
        better = max if checkpoint.mode == "max" else min
        logger.experiment.summary[key] = float(value) if best is None else better(float(best), float(value))
