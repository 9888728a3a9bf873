"""PeriodicCheckpoint: ``last.ckpt`` every N optimizer steps, on SIGTERM and at the end of training,
never between an epoch's last step and its validation.

A plain ``ModelCheckpoint(every_n_train_steps=N)`` saves at the epoch's last batch when N divides the
epoch (or the step count happens to land there). A kill during the validation that follows leaves a
``last.ckpt`` whose loop state says "epoch finished": Lightning resumes in the next epoch and the killed
epoch is never validated, so best-checkpoint selection silently skips it. Here that one save waits for
the end of the epoch's validation, when the checkpoint also holds the validated state; a kill before it
resumes from the previous periodic save and replays the end of the epoch, validation included.
"""

from __future__ import annotations

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.utilities.exceptions import SIGTERMException


def _validation_follows(trainer: pl.Trainer) -> bool:
    """True when the batch that just ended is its epoch's last and the epoch's validation will run."""
    if not getattr(trainer.fit_loop.epoch_loop.batch_progress, "is_last_batch", False):
        return False
    num_val = trainer.num_val_batches
    num_val = sum(num_val) if isinstance(num_val, list) else num_val
    every = trainer.check_val_every_n_epoch
    return bool(trainer.enable_validation and num_val) and (
        every is None or (trainer.current_epoch + 1) % every == 0
    )


class PeriodicCheckpoint(ModelCheckpoint):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._save_after_validation = False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if trainer.received_sigterm and not _validation_follows(trainer):
            # Lightning stops after this hook (SIGTERM: a scheduler's preemption, `kill`): save where the
            # run is, so `ckpt_path=last` resumes here rather than at the last periodic save.
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
            return
        if _validation_follows(trainer):
            due = self._every_n_train_steps >= 1 and trainer.global_step % self._every_n_train_steps == 0
            self._save_after_validation = self._save_after_validation or due
            return
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        # A SIGTERM that arrived after this batch's on_train_batch_end: Lightning stops at the batch's end.
        if isinstance(exception, SIGTERMException) and self._last_global_step_saved != trainer.global_step:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        if self._save_after_validation and not trainer.sanity_checking:
            self._save_pending(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # A finished run's last.ckpt is its end, so resuming extends it: the steps since the last periodic
        # save, or a save deferred to a validation that did not run after all (e.g. max_time).
        if self._save_after_validation or self._last_global_step_saved != trainer.global_step:
            self._save_pending(trainer)
        super().on_train_end(trainer, pl_module)

    def _save_pending(self, trainer: pl.Trainer) -> None:
        self._save_after_validation = False
        if not self._should_skip_saving_checkpoint(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
