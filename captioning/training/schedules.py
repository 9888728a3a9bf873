"""Learning-rate schedules. Factories take ``(optimizer, total_steps)``; the LightningModule supplies
``total_steps`` from the trainer, so schedules follow max_epochs / max_steps without extra config."""

from __future__ import annotations

import math
from typing import Annotated

import torch

from captioning.bounds import AtLeast, Between, check_bounds


def warmup_cosine(
    optimizer: torch.optim.Optimizer,
    total_steps: int,
    warmup_steps: Annotated[int, AtLeast(0)] = 100,
    min_lr_ratio: Annotated[float, Between(0, 1)] = 0.05,
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up to the base LR, then cosine decay to ``min_lr_ratio`` × base at ``total_steps``."""
    check_bounds(
        "model.scheduler", warmup_cosine, {"warmup_steps": warmup_steps, "min_lr_ratio": min_lr_ratio}
    )
    total_steps = max(int(total_steps), warmup_steps + 1)

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
        return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def constant(optimizer: torch.optim.Optimizer, total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
