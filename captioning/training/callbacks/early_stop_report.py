"""EarlyStopReport: one line when early stopping ends a run, saying why, instead of a run that just ends.

    early stopping ended the run in epoch 2 of max_epochs=29 (epochs count from 0): val/CIDEr did not
    improve by more than min_delta=0.002 for 2 validations (patience=2); best val/CIDEr 0.4512 in epoch 0;
    the best checkpoint is kept. To train on: callbacks.early_stopping.patience=N or callbacks.early_stopping=null

It watches whatever ``EarlyStopping`` callback the run has (any config's ``callbacks.early_stopping``,
Lightning's own class), so it sits in the default callbacks (captioning/conf/callbacks/default.yaml) and
needs nothing from the experiments. A run that ends at max_epochs, max_time or a signal prints nothing. The
validations it has seen travel in the checkpoint, so a resumed run names the best of the whole run.
"""

from __future__ import annotations

import math

import pytorch_lightning as pl
from pytorch_lightning.callbacks import EarlyStopping


class EarlyStopReport(pl.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.history: dict[
            str, list[tuple[int, float]]
        ] = {}  # monitor -> [(epoch, value)] of each validation
        self.line: str | None = None  # the line printed, for tests
        self._at_start: dict[int, tuple] = {}  # id(stopper) -> its (reason, epoch) once a resumed state is in

    def state_dict(self) -> dict[str, list[list[float]]]:
        # In the checkpoint: a resumed run names the best of the whole run, as the kept checkpoint has it.
        return {monitor: [[epoch, value] for epoch, value in seen] for monitor, seen in self.history.items()}

    def load_state_dict(self, state_dict: dict) -> None:
        self.history = {m: [(int(e), float(v)) for e, v in seen] for m, seen in state_dict.items()}

    @staticmethod
    def _stoppers(trainer: pl.Trainer) -> list[EarlyStopping]:
        return [cb for cb in trainer.callbacks if isinstance(cb, EarlyStopping)]

    @staticmethod
    def _stop_of(es: EarlyStopping) -> tuple:
        return str(getattr(es, "stopping_reason", None)), es.stopped_epoch

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # A resumed stopper may hold the stop of the run it was saved from (Lightning's own class restores
        # it): only a stop that happens in this run is this run's to report.
        self._at_start = {id(es): self._stop_of(es) for es in self._stoppers(trainer)}

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        for es in self._stoppers(trainer):
            value = trainer.callback_metrics.get(es.monitor)
            if value is not None:
                self.history.setdefault(es.monitor, []).append((trainer.current_epoch, float(value)))

    def _best(self, es: EarlyStopping) -> tuple[int, float] | None:
        """(epoch, value) of the first validation with the best finite value, as the best checkpoint is
        ranked. Not the stopper's own ``best_score``: it moves only on a gain above ``min_delta``, so after a
        smaller gain it names an earlier epoch than the checkpoint kept."""
        seen = [(epoch, v) for epoch, v in self.history.get(es.monitor, []) if math.isfinite(v)]
        if not seen:
            return None
        top = (max if es.mode == "max" else min)(v for _, v in seen)
        return next((epoch, v) for epoch, v in seen if v == top)

    def describe(self, es: EarlyStopping, trainer: pl.Trainer) -> str | None:
        """The line for a stopper that ended the run, or None if it did not."""
        if id(es) in self._at_start and self._at_start[id(es)] == self._stop_of(es):
            return None  # the stop of the run this one resumed, not this run's
        reason = getattr(es, "stopping_reason", None)  # Lightning >= 2.5: an enum, NOT_STOPPED until it stops
        name = getattr(reason, "name", None)
        if name is None:  # older Lightning: it stopped if the trainer stops and its patience ran out
            if not (trainer.should_stop and es.wait_count >= es.patience):
                return None
            name = "PATIENCE_EXHAUSTED"
        if name == "NOT_STOPPED":
            return None
        epochs = f"in epoch {es.stopped_epoch} of max_epochs={trainer.max_epochs} (epochs count from 0)"
        best = self._best(es)
        best_text = (
            f"best {es.monitor} {best[1]:.4f} in epoch {best[0]}" if best else f"no finite {es.monitor} yet"
        )
        if name == "PATIENCE_EXHAUSTED":
            why = (
                f"{es.monitor} did not improve by more than min_delta={abs(es.min_delta):g} for "
                f"{es.wait_count} validation{'s' if es.wait_count != 1 else ''} (patience={es.patience})"
            )
        else:  # a non-finite metric, a stopping or divergence threshold: Lightning's own words
            why = " ".join(str(getattr(es, "stopping_reason_message", "") or name).split())
            why = why.removesuffix(" Signaling Trainer to stop.") + f" (patience={es.patience})"
        return (
            f"early stopping ended the run {epochs}: {why}; {best_text}; the best checkpoint is kept. "
            "To train on: callbacks.early_stopping.patience=N or callbacks.early_stopping=null"
        )

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        for es in self._stoppers(trainer):
            line = self.describe(es, trainer)
            if line:
                self.line = line
                if trainer.is_global_zero:
                    print(line, flush=True)
