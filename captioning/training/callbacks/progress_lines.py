"""ProgressLines: with the progress bar off (``trainer.enable_progress_bar=false``, as the compare recipe
uses, or a run whose output is not a terminal: ``bar_on``), print one line every N optimizer steps and
after every validation:

    step 300/600 (50%) epoch 1 | train/loss 1.234 | val/Bleu_4 0.612 val/CIDEr 4.21 | 2.1 min, ETA 2.1 min

The ETA is for the whole run: elapsed / steps done × steps left (``max_steps`` or epochs × batches),
capped by what ``max_time`` leaves. With the bar on it prints nothing (the bar says it already).
"""

from __future__ import annotations

import sys
import time
from typing import IO

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Timer


def bar_on(enabled: bool | None, stream: IO[str] | None = None) -> bool:
    """Whether the run gets Lightning's progress bar: when ``trainer.enable_progress_bar`` asks for it and
    the bar's stream (stdout) is a terminal. Piped into a file, ``tee`` or a script, or run in the
    background, the bar's carriage-return updates never end a line, so nothing would show until the end:
    there the bar is off and these lines report instead."""
    stream = sys.stdout if stream is None else stream
    return enabled is not False and bool(getattr(stream, "isatty", lambda: False)())


class ProgressLines(pl.Callback):
    def __init__(self, every_n_steps: int = 50):
        super().__init__()
        if every_n_steps < 1:
            raise ValueError(f"ProgressLines: every_n_steps={every_n_steps}, expected >= 1")
        self.every_n_steps = every_n_steps
        self.start: float | None = None
        self.start_step = 0

    def _active(self, trainer: pl.Trainer) -> bool:
        return (
            trainer.progress_bar_callback is None and trainer.is_global_zero and not trainer.sanity_checking
        )

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.start, self.start_step = time.monotonic(), trainer.global_step  # a resumed run counts from here

    def line(self, trainer: pl.Trainer) -> str:
        step, total = trainer.global_step, int(trainer.estimated_stepping_batches)
        elapsed = time.monotonic() - (self.start or time.monotonic())
        done = max(step - self.start_step, 1)
        eta = elapsed / done * max(total - step, 0)
        timers = [cb for cb in trainer.callbacks if isinstance(cb, Timer)]  # trainer.max_time adds one
        if timers and timers[0].time_remaining() is not None:
            eta = min(eta, max(float(timers[0].time_remaining()), 0.0))
        metrics = trainer.callback_metrics
        train = " ".join(
            f"{k} {float(v):.3f}"
            for k, v in metrics.items()
            # loss = xent + attention_reg (λ·eq. 14, the doubly stochastic penalty): printed side by side so a
            # loss of ~30 next to a cross-entropy of ~3 reads as the penalty, not as a broken run
            if k in ("train/loss", "train/xent", "train/attention_reg", "train/reward")  # reward: SCST
        )
        val = " ".join(
            f"{k} {float(v):.3f}"
            for k, v in sorted(metrics.items())
            if k.startswith("val/") and k != "val/attention_reg"
        )
        share = f" ({100 * step / total:.0f}%)" if total > 0 else ""
        parts = [f"step {step}/{total}{share} epoch {trainer.current_epoch}", train, val,
                 f"{elapsed / 60:.1f} min, ETA {eta / 60:.1f} min"]  # fmt: skip
        return " | ".join(p for p in parts if p)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if self._active(trainer) and trainer.global_step % self.every_n_steps == 0 and trainer.global_step:
            print(self.line(trainer), flush=True)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._active(trainer) and self.start is not None:
            print(self.line(trainer), flush=True)
