"""UnfreezeEncoder: staged fine-tuning. The encoder's trained stages (``model.encoder.fine_tune_from``) stay
fixed for the first ``at_epoch`` epochs, while the randomly initialised decoder learns to read the pretrained
features, and train from epoch ``at_epoch`` on.

Why stage it: early gradients come from a decoder that is still noise, and a pretrained stage that follows
them only forgets ImageNet; Lu et al. (2017) and Anderson et al. (2018) likewise fine-tune the CNN after the
language model has trained. While held, a step costs the trained stages' forward pass only (no backward): the
cheap epochs come first.

The state follows ``trainer.current_epoch`` at every epoch start, so a run resumed in either phase (``ckpt_path=last``)
continues in the right one. The optimizer already holds the encoder's parameter group (its own learning rate,
``lr_scale``); while held the group gets no gradients, and AdamW skips parameters without one (no update, no
weight decay). Its learning rate follows the shared schedule all along, so at release it is the schedule's value
at that step, not its peak.
"""

from __future__ import annotations

import sys
from typing import Annotated

import pytorch_lightning as pl

from captioning.bounds import AtLeast, check_bounds


class UnfreezeEncoder(pl.Callback):
    def __init__(self, at_epoch: Annotated[int, AtLeast(0)]) -> None:
        if isinstance(at_epoch, bool) or not isinstance(at_epoch, int):
            raise ValueError(
                f"callbacks.unfreeze_encoder.at_epoch={at_epoch!r}: expected an integer (0 = no staging)"
            )
        check_bounds("callbacks.unfreeze_encoder", UnfreezeEncoder, {"at_epoch": at_epoch})
        self.at_epoch = at_epoch

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        encoder = pl_module.net.encoder
        if not callable(getattr(encoder, "hold", None)) or not encoder.trainable:
            raise ValueError(
                f"callbacks.unfreeze_encoder: model.encoder ({type(encoder).__name__}) trains no stage; set "
                "model.encoder.fine_tune_from (e.g. stage7) or drop the callback"
            )
        # DDP refuses a step in which a parameter that requires grad gets none, unless told to look for them.
        ddp_kwargs = getattr(trainer.strategy, "_ddp_kwargs", None)
        holds = trainer.current_epoch < self.at_epoch
        if (
            holds
            and trainer.world_size > 1
            and ddp_kwargs is not None
            and not ddp_kwargs.get("find_unused_parameters")
        ):
            raise ValueError(
                "callbacks.unfreeze_encoder: the held stages get no gradient until epoch "
                f"{self.at_epoch}, which DDP refuses; use trainer.strategy=ddp_find_unused_parameters_true"
            )
        self._apply(trainer, pl_module)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._apply(trainer, pl_module)

    def _apply(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        encoder = pl_module.net.encoder
        held = trainer.current_epoch < self.at_epoch
        if held != encoder.held:
            encoder.hold(held)
            if trainer.is_global_zero:
                what = "held (no gradient) until epoch" if held else "trained from epoch"
                print(
                    f"encoder: {', '.join(encoder.stage_names[encoder.first_trained :])} {what} "
                    f"{self.at_epoch}",
                    file=sys.stderr,
                    flush=True,
                )
