"""RunSummary: ``run.json`` in the run folder when fit ends, what a sweep's aggregator reads per job.

``scripts/compare.py MULTIRUN_DIR`` finds every job of a ``captioning-train -m`` sweep by its
``.hydra/overrides.yaml`` and reads this file beside it, instead of parsing the job's log::

    {"checkpoint": ".../checkpoints/epoch007-step000096-cider0.4123.ckpt",   # best (or last.ckpt)
     "monitor": "val/CIDEr", "mode": "max", "best_score": 0.4123,
     "best": {"epoch": 7, "step": 96, "metrics": {"val/CIDEr": 0.4123, "val/Bleu_4": ...}},
     "last": {...},                     # the last validation, the same fields
     "global_step": 96, "epochs": 8, "train_seconds": 812.4,
     "params": {"total": ..., "trainable": ...}, "history": [...], "finished": true,
     "job": {"config": {...}, "overrides": [...], "hydra_files": {...}}}  # ckpt_path=auto's check

``best`` holds every ``val/*`` metric of the validation that produced the best checkpoint (the
checkpoint callback keeps only the monitored value). With no validation (``limit_val_batches=0``,
``max_steps`` before the first) the checkpoint is last.ckpt, as ``captioning-train`` prints, and ``best``
is null. ``finished`` is true only once fit has ended: the file is also written after every validation
(``finished: false``), so a run stopped by a signal or a time limit and resumed with ``ckpt_path=last``
reads its ``history`` back (and adds its train time), and its best still comes with its metrics. A job
whose run.json is missing or unfinished did not finish. Written by global rank 0 only, to a temp file
renamed over the old one.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint

from captioning.data.files import write_text_atomically
from captioning.training.resume import last_checkpoint_path


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


class RunSummary(pl.Callback):
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.history: list[dict[str, Any]] = []  # one entry per validation: epoch, step, val/* metrics
        self._start = 0.0
        self._earlier_seconds = 0.0
        self.job: dict[str, Any] | None = None  # what defines the job (training/job_record.py)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = time.perf_counter()
        self._earlier_seconds = 0.0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.ckpt_path and self.path.is_file():  # resumed: the validations and time before it count
            try:
                earlier = json.loads(self.path.read_text())
            except (OSError, ValueError):
                return
            # The step is restored by now (not yet in on_fit_start); validations after it are not kept.
            step = trainer.global_step
            self.history = [h for h in earlier.get("history") or [] if h.get("step", 0) <= step]
            self._earlier_seconds = float(earlier.get("train_seconds") or 0.0)
            if self.job is None and isinstance(earlier.get("job"), dict):
                self.job = earlier["job"]

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        metrics = {
            key: _number(value)
            for key, value in trainer.callback_metrics.items()
            if key.startswith("val/") and value is not None
        }
        self.history.append({"epoch": trainer.current_epoch, "step": trainer.global_step, "metrics": metrics})
        self._write(trainer, pl_module, finished=False)  # what a resumed run reads back

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._write(trainer, pl_module, finished=True)

    def _write(self, trainer: pl.Trainer, pl_module: pl.LightningModule, finished: bool) -> None:
        if not trainer.is_global_zero:
            return
        ranking = next(
            (cb for cb in trainer.checkpoint_callbacks if isinstance(cb, ModelCheckpoint) and cb.monitor),
            None,
        )
        checkpoint = ranking.best_model_path if ranking is not None else ""
        best_score = _number(ranking.best_model_score) if ranking is not None else None
        best = None
        if ranking is not None and best_score is not None:  # the first validation with that value
            best = next(
                (h for h in self.history if h["metrics"].get(ranking.monitor) == best_score),
                None,
            )
        if not checkpoint:
            last = last_checkpoint_path(str(self.path.parent))
            checkpoint = str(last) if last.is_file() else ""
        summary = {
            "checkpoint": checkpoint or None,
            "monitor": ranking.monitor if ranking is not None else None,
            "mode": ranking.mode if ranking is not None else None,
            "best_score": best_score,
            "best": best,
            "last": self.history[-1] if self.history else None,
            "global_step": trainer.global_step,
            "epochs": trainer.current_epoch,
            "train_seconds": self._earlier_seconds + time.perf_counter() - self._start,
            "params": {
                "total": sum(p.numel() for p in pl_module.parameters()),
                "trainable": sum(p.numel() for p in pl_module.parameters() if p.requires_grad),
            },
            "history": self.history,  # every validation, so that a resumed run still knows the best one
            "finished": finished,
            "job": self.job,  # what ckpt_path=auto compares a re-run job with (training/job_record.py)
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(self.path, json.dumps(summary, indent=2) + "\n")
