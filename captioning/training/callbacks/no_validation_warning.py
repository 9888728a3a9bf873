"""NoValidationWarning: one line on stderr when training starts if the run will end before its first
validation, so before any checkpoint is ranked by the monitored metric:

    warning: this run will never validate: trainer.max_steps=200 ends before the first validation, at
    step 469 (one epoch of 469 batches, val_check_interval=1.0); ...

The usual cause is ``max_steps`` shorter than one epoch with validation once per epoch (the default),
in a sweep of short jobs above all; without this line the run says so only at its end ("no validation
ran"). Known at ``on_train_start``: Lightning has counted the batches per epoch and set where it
validates (``val_check_batch``) by then. Mirrors Lightning's own rule (``_should_check_val_fx``): with
``check_val_every_n_epoch=N`` it validates in every N-th epoch at every ``val_check_batch``-th batch of
that epoch; with ``check_val_every_n_epoch=null`` at every ``val_check_batch``-th batch counted across
epochs. A wall-clock limit (``max_time``) is not foreseen: it is not known how far it gets.
"""

from __future__ import annotations

import sys

import pytorch_lightning as pl


def first_validation_step(trainer: pl.Trainer) -> int | None:
    """The optimizer step after which the first validation runs, or None when it is not counted in
    batches (time-based validation, a dataset of unknown length)."""
    every_batch = trainer.val_check_batch
    batches = trainer.num_training_batches
    if every_batch is None or every_batch == float("inf") or batches in (0, float("inf")):
        return None
    every_epoch = trainer.check_val_every_n_epoch
    if every_epoch is None:  # counted across epochs
        first_batch = int(every_batch)
    else:  # in the N-th epoch, at its val_check_batch-th batch (or its last)
        first_batch = (every_epoch - 1) * int(batches) + min(int(every_batch), int(batches))
    return first_batch // max(int(trainer.accumulate_grad_batches), 1)


def reason(trainer: pl.Trainer) -> str | None:
    """Why the run will end before it validates, or None when it will validate (or cannot be told)."""
    if trainer.limit_val_batches == 0:
        return "trainer.limit_val_batches=0"
    first = first_validation_step(trainer)
    if first is None:
        return None
    every_epoch = trainer.check_val_every_n_epoch
    where = (
        f"step {first} (val_check_interval={trainer.val_check_interval} steps)"
        if every_epoch is None
        else f"step {first} (epoch {every_epoch} of {trainer.num_training_batches} batches, "
        f"val_check_interval={trainer.val_check_interval}, check_val_every_n_epoch={every_epoch})"
    )
    if trainer.max_steps is not None and trainer.max_steps >= 0 and trainer.max_steps < first:
        return f"trainer.max_steps={trainer.max_steps} ends before the first validation, at {where}"
    max_epochs = trainer.max_epochs
    if every_epoch is not None and max_epochs is not None and max_epochs >= 0 and max_epochs < every_epoch:
        return f"trainer.max_epochs={max_epochs} ends before the first validation, at {where}"
    return None


class NoValidationWarning(pl.Callback):
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.is_global_zero or trainer.global_step > 0:  # a resumed run: its plan was warned about
            return
        why = reason(trainer)
        if why:
            print(
                f"warning: this run will never validate: {why}; no checkpoint will be ranked and val/* "
                "never logged (validate in steps: trainer.val_check_interval=N "
                "trainer.check_val_every_n_epoch=null, with N <= max_steps)",
                file=sys.stderr,
                flush=True,
            )
