"""EarlyStopping whose patience counts the validations of the schedule, not the one Lightning adds at a stop.

When something else ends a run in the middle of an epoch (``trainer.max_time``, a callback that sets
``trainer.should_stop``), Lightning validates once more so that the checkpoint callbacks can rank the
weights it stops with. Lightning's own ``EarlyStopping`` counts that validation toward its patience, and the
count travels in ``last.ckpt``: a run cut by a wall-clock limit and resumed (``trainer.max_time`` under a
cluster's time limit, then ``ckpt_path=last``) stopped one scheduled validation earlier than the same run
uninterrupted; with patience 2, at the first epoch-end validation without a gain after the resume. Here that
validation is still run, logged and ranked by the checkpoint callbacks, but early stopping does not check
it: an interrupted and resumed run stops where the uninterrupted one does.
"""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import EarlyStopping as LightningEarlyStopping
from pytorch_lightning.callbacks.early_stopping import EarlyStoppingReason


def validation_for_a_stop(trainer: pl.Trainer) -> bool:
    """True when the validation now running is only there because the run is stopping: the trainer stops,
    and the batch that ended was neither its epoch's last nor one the step schedule validates at
    (``val_check_interval`` in batches). A validation the schedule runs anyway counts as usual."""
    loop = trainer.fit_loop.epoch_loop
    if not trainer.should_stop or loop.batch_progress.is_last_batch:
        return False
    every = trainer.val_check_batch
    if getattr(trainer, "_val_check_time_interval", None) is None and isinstance(every, int) and every > 0:
        done = loop.total_batch_idx if trainer.check_val_every_n_epoch is None else loop.batch_idx
        return (done + 1) % every != 0
    return True  # a time-based or infinite schedule: a stop's validation is never one of its own


class EarlyStopping(LightningEarlyStopping):
    """Lightning's ``EarlyStopping`` (same arguments), skipping the validation a stop adds (module doc), and
    resumed with this run's own patience (below)."""

    def _should_skip_check(self, trainer: pl.Trainer) -> bool:
        return super()._should_skip_check(trainer) or validation_for_a_stop(trainer)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """The count of validations without a gain and the best value go on from the checkpoint; the
        patience stays this run's (Lightning's restores the saved one, so resuming a stopped run with
        ``callbacks.early_stopping.patience=N``, as the stop's own line advises, stopped it again at once),
        and the earlier run's stop is not this run's (its line was printed again at the end)."""
        patience = self.patience
        super().load_state_dict(state_dict)
        self.patience = patience
        self.stopping_reason = EarlyStoppingReason.NOT_STOPPED
        self.stopping_reason_message = None
