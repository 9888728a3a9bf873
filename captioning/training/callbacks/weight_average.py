"""WeightAverage: an exponential moving average of the trained weights (Polyak averaging), used for
validation, checkpoint ranking and every saved checkpoint.

θ̄ = θ after the first optimizer step, then θ̄ ← d_k θ̄ + (1 − d_k) θ after the k-th step that follows
(k = 1, 2, ...; micro-batches of gradient accumulation do not count), with d_k = min(decay, (1 + k) /
(10 + k)): the warm-up term keeps the first averages from being dominated by the earliest weights (with
the fixed decay alone their weight after k steps would still be decay^k). With
decay 0.999 the average spans ~1,000 steps, two Flickr8k epochs. Measured there (docs/experiments/
flickr8k.md, "Weight averaging"): ahead of the trained weights while the learning rate is high, level once a cosine schedule
has ended, so it serves runs stopped early.

Only the network's trainable parameters are averaged (a tied matrix once, written under each of its
names: the Transformer's output layer shares the token embedding); buffers (the REINFORCE baseline, step counters,
the frozen encoder's batch-norm statistics) stay those of the trained model, since averaging a counter
or a running statistic means nothing. Lightning's ``WeightAveraging`` would deep-copy the whole module
(frozen encoder included) and average buffers by default; this keeps one float32 shadow per trained
tensor.

Checkpoints: ``state_dict`` holds the averaged weights, so `captioning caption / evaluate / export` and
``init_from`` read the average with no special case; the trained weights and the update count travel
in this callback's state, and a resumed run puts them back (``ckpt_path=last`` continues exactly).
Validation swaps the average in and back out; a checkpoint written in between (a SIGTERM during
validation) is written the same way.
"""

from __future__ import annotations

import pytorch_lightning as pl
import torch
from torch import Tensor


class WeightAverage(pl.Callback):
    def __init__(self, decay: float = 0.999) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"callbacks.weight_average.decay: expected a number in (0, 1), got {decay!r}")
        self.decay = float(decay)
        self.num_updates = 0
        self._average: dict[str, Tensor] = {}  # name -> float32 running average
        self._swapped = False  # True while the module holds the average (validation)
        self._restore: dict[str, Tensor] | None = None  # trained weights read from a checkpoint
        self._seen_step: int | None = None  # the optimizer step of the last update

    @property
    def state_key(self) -> str:
        return "WeightAverage"

    @staticmethod
    def _trained(pl_module: pl.LightningModule) -> dict[str, Tensor]:
        """Trainable parameters by name, a tied one once (under its first name)."""
        return {n: p for n, p in pl_module.net.named_parameters() if p.requires_grad}

    @staticmethod
    def _names(pl_module: pl.LightningModule) -> dict[str, str]:
        """Every state_dict name of a trainable parameter -> the name it is averaged under."""
        first: dict[int, str] = {}
        return {
            n: first.setdefault(id(p), n)
            for n, p in pl_module.net.named_parameters(remove_duplicate=False)
            if p.requires_grad
        }

    def decay_at(self, k: int) -> float:
        """d_k of the module docstring (k = updates since the first)."""
        return min(self.decay, (1.0 + k) / (10.0 + k))

    # -- averaging --------------------------------------------------------------------------------
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if trainer.global_step == self._seen_step:
            return  # a micro-batch of gradient accumulation: the weights did not move
        self._seen_step = trainer.global_step
        trained = self._trained(pl_module)
        if not self._average:  # the first update (after init_from or a resume has set the weights)
            self._average = {n: p.detach().float().clone() for n, p in trained.items()}
        else:
            weight = 1.0 - self.decay_at(self.num_updates)
            averages = [self._average[n] for n in trained]
            torch._foreach_lerp_(averages, [p.detach().float() for p in trained.values()], weight)
        self.num_updates += 1

    def _swap(self, pl_module: pl.LightningModule) -> None:
        with torch.no_grad():
            for name, p in self._trained(pl_module).items():
                held = p.detach().float().clone()
                p.copy_(self._average[name])
                self._average[name] = held
        self._swapped = not self._swapped

    def on_validation_epoch_start(self, trainer, pl_module) -> None:
        if self._average and not self._swapped:
            self._swap(pl_module)

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if self._swapped:
            self._swap(pl_module)

    # -- checkpoints ------------------------------------------------------------------------------
    def _split(self, pl_module: pl.LightningModule) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """(averaged, trained) weights by parameter name, whichever of the two the module holds now."""
        held = {n: p.detach() for n, p in self._trained(pl_module).items()}
        return (held, self._average) if self._swapped else (self._average, held)

    def state_dict(self) -> dict:
        return {"decay": self.decay, "num_updates": self.num_updates}

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        if not self._average:
            return  # nothing averaged yet: the checkpoint holds the trained weights as they are
        averaged, trained = self._split(pl_module)
        dtypes = {n: p.dtype for n, p in self._trained(pl_module).items()}
        for name, averaged_as in self._names(pl_module).items():
            checkpoint["state_dict"][f"net.{name}"] = averaged[averaged_as].to(dtypes[averaged_as]).clone()
        state = checkpoint.setdefault("callbacks", {}).setdefault(self.state_key, self.state_dict())
        state["trained"] = {n: v.clone() for n, v in trained.items()}

    def load_state_dict(self, state_dict: dict) -> None:
        self.num_updates = int(state_dict.get("num_updates", 0))
        self._restore = state_dict.get("trained")

    def on_train_start(self, trainer, pl_module) -> None:
        self._seen_step = trainer.global_step  # 0, or the resumed step: the next update is a new one
        # Resuming: the module was loaded from state_dict, i.e. the average; put the trained weights
        # back and keep the average as the running one.
        if self._restore is None:
            return
        trained = self._trained(pl_module)
        self._average = {n: p.detach().float().clone() for n, p in trained.items()}
        with torch.no_grad():
            for name, p in trained.items():
                p.copy_(self._restore[name])
        self._restore = None
