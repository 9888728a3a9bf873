"""FiniteLossGuard: stop training at the first NaN/inf loss, before it reaches the weights or a checkpoint.

The check runs in ``on_before_backward``, i.e. before the backward pass and the optimizer step of the bad
batch, so the weights in memory are still those of the last good step. It raises
:class:`NonFiniteLossError` (rather than setting ``trainer.should_stop``) because a graceful stop would
run the end-of-epoch/end-of-training checkpoint hooks and could write NaN weights over ``last.ckpt``; an
exception skips them (keep ``ModelCheckpoint.save_on_exception`` off, its default). The error names the
step and the last checkpoint on disk, from which ``ckpt_path=last`` resumes.
"""

from __future__ import annotations

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from torch import Tensor

from captioning.errors import UserError


class NonFiniteLossError(RuntimeError, UserError):
    """The training loss became NaN or infinite; the message names the step and the last checkpoint."""


class FiniteLossGuard(pl.Callback):
    def __init__(self) -> None:
        self._epoch, self._batch_idx = 0, 0

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch, batch_idx: int
    ) -> None:
        self._epoch, self._batch_idx = trainer.current_epoch, batch_idx
        # The step that breaks the weights can still have had a finite loss: look at the weights too.
        bad = [n for n, p in pl_module.named_parameters() if not bool(torch.isfinite(p.detach()).all())]
        if trainer.strategy.reduce_boolean_decision(not bad, all=True):
            return
        raise NonFiniteLossError(
            f"non-finite weights (NaN/inf) before global step {trainer.global_step} (epoch {self._epoch}, "
            f"batch {batch_idx}) in {', '.join(bad[:3]) or 'another rank'}: the previous update broke them "
            f"(its loss was finite). No checkpoint holds them (non-finite weights are never written). "
            f"{_last_checkpoint(trainer)}"
        )

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: Tensor) -> None:
        finite = bool(torch.isfinite(loss.detach()).all())
        # Agree across DDP ranks: a rank that raised alone would leave the others waiting in all-reduce.
        if trainer.strategy.reduce_boolean_decision(finite, all=True):
            return
        value = loss.detach().float().mean().item()
        raise NonFiniteLossError(
            f"non-finite training loss at global step {trainer.global_step} (epoch {self._epoch}, "
            f"batch {self._batch_idx}; this rank's loss: {value}). Stopped before the backward pass, "
            f"so neither the weights nor any checkpoint saw it. {_last_checkpoint(trainer)} "
            "Common causes: a learning rate too high for the batch size, fp16 overflow, corrupt inputs."
        )


def _last_checkpoint(trainer: pl.Trainer) -> str:
    paths = [
        cb.last_model_path
        for cb in trainer.callbacks
        if isinstance(cb, ModelCheckpoint) and cb.last_model_path
    ]
    if not paths:
        return "No checkpoint had been written yet."
    return f"The last good checkpoint is {paths[-1]} (resume with ckpt_path=last)."
