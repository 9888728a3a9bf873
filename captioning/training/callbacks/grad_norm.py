"""Training callbacks that watch the optimisation itself (not the model's outputs)."""

from __future__ import annotations

import pytorch_lightning as pl
import torch
from torch import Tensor


def grad_norm(module: torch.nn.Module) -> Tensor | None:
    """L2 norm of all gradients of ``module``'s parameters together (None when none has a gradient)."""
    norms = [p.grad.detach().norm(2) for p in module.parameters() if p.grad is not None]
    return torch.linalg.vector_norm(torch.stack(norms)) if norms else None


class AttentionGradNorm(pl.Callback):
    """Logs ``train/attention_grad_norm``: how hard the loss pushes the attention layer's parameters.

    For hard attention this is where the REINFORCE estimator's variance shows (spikes, or a norm far
    above the rest of the network's). Measured in ``on_before_optimizer_step``, i.e. after gradient
    accumulation and *before* gradient clipping. ``module`` is the attribute path from the
    LightningModule; models without such a submodule (a decoder with no attention layer) log nothing.
    """

    def __init__(self, module: str = "net.decoder.attention"):
        super().__init__()
        self.module = module

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        try:
            attention = pl_module.get_submodule(self.module)
        except AttributeError:
            return
        norm = grad_norm(attention)
        if norm is not None:
            pl_module.log("train/attention_grad_norm", norm, on_step=True, on_epoch=False)
