"""PeriodicCheckpoint: ``last.ckpt`` every N optimizer steps or M minutes of training (whichever comes first), after every validation, on SIGTERM and at
the end of training, never between an epoch's last step and its validation (or, counted in epochs, its
end: ``_epoch_end_follows``). It is the one writer of
``last.ckpt`` (``model_checkpoint`` keeps only the best), and it saves after the best of a validation
is written, so a kill between the two never skips that best (``_rank_first``).

A plain ``ModelCheckpoint(every_n_train_steps=N)`` saves at the epoch's last batch when N divides the
epoch (or the step count happens to land there). A kill during the validation that follows leaves a
``last.ckpt`` whose loop state says "epoch finished": Lightning resumes in the next epoch and the killed
epoch is never validated, so best-checkpoint selection silently skips it. Here that one save waits for
the end of the epoch's validation, when the checkpoint also holds the validated state; a kill before it
resumes from the previous periodic save and replays the end of the epoch, validation included.

A run stopped by ``max_steps`` inside an epoch is saved at its last batch, where it is: Lightning marks
the epoch finished before ``on_train_end``, so a save there (``ModelCheckpoint(save_last=True)`` makes
one) would resume a longer run in the next epoch, skipping the rest of this one and its validation
(with ``max_epochs=1``: training nothing at all).

With several processes a SIGTERM is acted on where all of them agree (``_agree``). Each process notices
the signal at its own point of a step (a scheduler signals every task, one of them first; ``kill`` reaches
one), and everything that follows it is collective: the save, and Lightning's own stop, which each
process takes at the end of the batch in which *it* saw the signal. One process stopping or saving a
batch before the others left the rest waiting in a collective it never joined (a crash or a hang, and
no checkpoint). Lightning's notice (its ``_SignalConnector``) also broadcast from inside the signal
handler, a collective at whatever point the signal interrupted. So the handler here only notes the
signal (and passes it on to processes this one launched, as Lightning's does); at the end of every
training and validation batch the processes reduce their notes, and if any has one, all of them mark
the stop at that same batch, save there, and leave together.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import FrameType

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.trainer.states import TrainerFn
from pytorch_lightning.utilities.exceptions import SIGTERMException


def _stops_at_max_steps(trainer: pl.Trainer) -> bool:
    return trainer.max_steps is not None and 0 <= trainer.max_steps <= trainer.global_step


def _epoch_end_follows(trainer: pl.Trainer) -> bool:
    """True when the batch that just ended is its epoch's last, no validation follows it, and the run is
    counted in epochs (max_steps=-1). A run counted in steps resumes from an epoch's end into a wrong state
    (Lightning restarts it as if inside the epoch: another batch of it), so it keeps the last batch's save."""
    last = getattr(trainer.fit_loop.epoch_loop.batch_progress, "is_last_batch", False)
    return bool(last) and not _validation_follows(trainer) and trainer.max_steps == -1


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
    def __init__(self, every_n_minutes: float | None = 10.0, **kwargs) -> None:
        """``every_n_minutes``: also save once that many minutes of wall-clock time have passed since the
        last save (rank 0's clock decides for all ranks); None: by steps only. The time interval is what
        a job loses at most to a kill that gives no warning (SIGKILL, a node failure): a preemption's
        SIGTERM saves where the run is (``on_train_batch_end``)."""
        if every_n_minutes is not None and not every_n_minutes > 0:
            raise ValueError(f"every_n_minutes={every_n_minutes}: expected minutes > 0, or null")
        super().__init__(**kwargs)
        self._save_after_validation = False
        self._save_at_epoch_end = False
        self._every_n_seconds = None if every_n_minutes is None else 60.0 * every_n_minutes
        self._last_save_time = time.monotonic()
        self.sigterm_noticed = False  # this process got SIGTERM, not yet acted on (several processes only)
        self._launcher = None  # what started the other processes, if this one did (Lightning's launcher)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        self.sigterm_noticed = False  # a second fit with this callback starts without the first's note
        if stage == "fit" and trainer.world_size > 1:
            # Lightning registers its SIGTERM handler after this hook, from this attribute.
            trainer._signal_connector._sigterm_notifier_fn = self._notice_sigterm
            self._launcher = trainer.strategy.launcher

    def _notice_sigterm(self, signum: int, frame: FrameType | None) -> None:
        """SIGTERM's handler in a run of several processes: a note, acted on where all processes agree."""
        if not self.sigterm_noticed and self._launcher is not None:
            # the processes this one started get it too, as Lightning's handler did
            self._launcher.kill(signum)
        self.sigterm_noticed = True

    def _agree(self, trainer: pl.Trainer, due: bool = False) -> tuple[bool, bool]:
        """(rank 0's ``due``, any process noticed SIGTERM): one reduction at the same point of a batch in
        every process. On a stop every process marks it where Lightning looks, so all of them leave at
        the end of this batch."""
        if trainer.world_size == 1:
            return due, trainer.received_sigterm
        flags = torch.tensor(
            [float(due and trainer.is_global_zero), float(self.sigterm_noticed)],
            device=trainer.strategy.root_device,
        )
        due, stop = (bool(f) for f in trainer.strategy.reduce(flags, reduce_op="max").tolist())
        if stop:
            trainer._signal_connector.received_sigterm = True
        return due, stop

    def _save_last_checkpoint(self, trainer: pl.Trainer, monitor_candidates: dict) -> None:
        super()._save_last_checkpoint(trainer, monitor_candidates)
        self._last_save_time = time.monotonic()

    def _due_by_time(self) -> bool:
        """Whether this process's clock says a timed save is due (rank 0's decides: ``_agree``)."""
        return self._every_n_seconds is not None and (
            time.monotonic() - self._last_save_time >= self._every_n_seconds
        )

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        # first: every process takes part in the reduction, at every batch; the saves below are collective
        by_time, sigterm = self._agree(trainer, self._due_by_time())
        if _epoch_end_follows(trainer):
            # Not at the epoch's last batch: Lightning resumes from there into the next epoch without its
            # start (no on_train_epoch_start, its progress never counts the epoch as started), so the save
            # after that resumed run's next one begins the epoch again. Saved at the epoch's end instead,
            # where Lightning's own end-of-epoch checkpoints resume from (a SIGTERM stops after it).
            due = self._every_n_train_steps >= 1 and trainer.global_step % self._every_n_train_steps == 0
            self._save_at_epoch_end = self._save_at_epoch_end or due or by_time or sigterm
            return
        if (sigterm or _stops_at_max_steps(trainer)) and not _validation_follows(trainer):
            # Lightning stops after this hook (SIGTERM: a scheduler's preemption, `kill`; max_steps): save
            # where the run is, so `ckpt_path=last` resumes here rather than at the last periodic save.
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
            return
        if _validation_follows(trainer):
            due = self._every_n_train_steps >= 1 and trainer.global_step % self._every_n_train_steps == 0
            self._save_after_validation = self._save_after_validation or due or by_time
            return
        if by_time and not self._should_skip_saving_checkpoint(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
            return
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int, dataloader_idx=0):
        # Lightning stops a validation at a batch's end on SIGTERM: all processes at the same one. (Every
        # process validates the same number of batches: the distributed sampler pads the shares.)
        self._agree(trainer)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        super().teardown(trainer, pl_module, stage)
        if stage != "fit" or trainer.world_size == 1:
            return
        vars(trainer._signal_connector).pop("_sigterm_notifier_fn", None)  # Lightning's again (a test stage)
        # A SIGTERM after the last batch's agreement: every process stops, as it would have, or none (one
        # going on to the test split alone would wait there for the others). Every process tears down fit.
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            self._agree(trainer)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_epoch_end(trainer, pl_module)
        if self._save_at_epoch_end:
            self._save_at_epoch_end = False
            if not self._should_skip_saving_checkpoint(trainer):  # not twice at one step
                self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        # A SIGTERM that arrived after this batch's on_train_batch_end: Lightning stops at the batch's end.
        # One during a validation is not saved over an existing last.ckpt: the loop state would say the
        # step was validated, and the resumed run would never validate it.
        if not isinstance(exception, SIGTERMException) or self._last_global_step_saved == trainer.global_step:
            return
        last = Path(self.dirpath or ".") / f"{self.CHECKPOINT_NAME_LAST}{self.FILE_EXTENSION}"
        if trainer.validating and last.is_file():
            return
        self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        if not trainer.sanity_checking and trainer.state.fn == TrainerFn.FITTING and not trainer.fast_dev_run:
            # The validated state, whether or not a periodic save was due, even when this step was saved
            # just before (max_steps on a step-interval validation): its ranking state is newer.
            self._save_after_validation = False
            self._rank_first(trainer)
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def _rank_first(self, trainer: pl.Trainer) -> None:
        """Let every other ModelCheckpoint keep its best of this validation now, before ``last.ckpt``
        records the validated state. Left to Lightning, one that saves at the end of the training epoch
        (validation once per epoch) writes its best *after* ``last.ckpt``: a kill in between resumed in
        the next epoch, with a ranking state that never saw this validation, and its best was never
        written. Done here, Lightning's own call later finds the step saved (or compares again, equal)."""
        candidates = self._monitor_candidates(trainer)
        for other in trainer.checkpoint_callbacks:
            if other is self or not isinstance(other, ModelCheckpoint) or other.save_top_k == 0:
                continue
            if other._should_skip_saving_checkpoint(trainer) or (
                other.monitor is not None and other.monitor not in candidates  # a metric logged later
            ):
                continue
            every = other._every_n_epochs
            if every >= 1 and (trainer.current_epoch + 1) % every == 0:
                other._save_topk_checkpoint(trainer, candidates)
                if other._last_global_step_saved == trainer.global_step:
                    other._save_last_checkpoint(trainer, candidates)  # as its own hook would (save_last)

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
