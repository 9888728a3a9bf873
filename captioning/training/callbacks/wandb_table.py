"""W&B overlay table: at every validation, a fixed set of val images with caption, references and overlay.

The first ``num_images`` images of the validation set are captioned with the module's own decoding
settings and rendered by :func:`captioning.inference.viz.figure_array`, the renderer of ``captioning caption
--overlay`` (hard attention therefore shows the selected cell of each word as a crisp square). The same
images every epoch, so a run's epochs, and runs, can be compared side by side in the W&B UI.

The callback is always in the default callback list and does nothing unless a ``WandbLogger`` is
attached (``logger=wandb`` or ``logger=[csv,wandb]``), so adding W&B needs no second override.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytorch_lightning as pl
import torch
from torch import Tensor

from captioning.decoding import decode_captions
from captioning.inference.viz import figure_array
from captioning.training.callbacks.wandb_logger import find_wandb_logger, stage_inside

COLUMNS = ["image_id", "epoch", "caption", "references", "overlay"]


@dataclass
class Example:
    image_id: int | str
    inputs: Tensor | None  # the model input exactly as in validation: (3, S, S) pixels in [0, 1], or None
    references: list[str]
    display: np.ndarray | None = None  # (H, W, 3) uint8; None: drawn from ``inputs`` (pixels only)
    key: str | None = None  # with a feature cache: the image's key there (no pixels in the batch)

    @property
    def image(self) -> np.ndarray:
        """(H, W, 3) uint8 for display."""
        if self.display is not None:
            return self.display
        return (
            (self.inputs.clamp(0, 1) * 255).round().byte().permute(1, 2, 0).numpy()
        )  # (3, S, S) -> (S, S, 3)


@dataclass
class Captioned:
    tokens: list[str]  # without <start>/<end>
    attention: np.ndarray  # (len(tokens), H*W): the weights used for each word


def first_examples(dataset, num_images: int) -> list[Example]:
    """The first ``num_images`` items of an ImageDataset-like dataset (dicts with images/image_ids/references)."""
    examples = []
    for i in range(min(num_images, len(dataset))):
        item = dataset[i]
        # Display the source image itself: with a feature cache the item has its key, not its pixels.
        display = np.asarray(dataset.split.source.image(item["indices"]))
        examples.append(
            Example(
                item["image_ids"],
                item.get("images"),
                list(item["references"]),
                display,
                item.get("image_keys"),
            )
        )
    return examples


@torch.no_grad()
def caption_examples(pl_module: pl.LightningModule, examples: list[Example]) -> list[Captioned]:
    """Decode the examples with ``pl_module.net``, its vocabulary and its validation decoding settings."""
    if examples[0].inputs is not None:
        inputs = torch.stack([ex.inputs for ex in examples]).to(
            pl_module.device, pl_module.dtype
        )  # (B, 3, S, S)
        decoded = decode_captions(pl_module.net, pl_module.vocab, inputs, **pl_module.decoding)
    else:  # a feature cache: the module's CachedEncoder has their features
        features = pl_module.cached_encoder.lookup([ex.key for ex in examples]).to(
            pl_module.device, pl_module.dtype
        )
        decoded = decode_captions(pl_module.net, pl_module.vocab, features=features, **pl_module.decoding)
    return [Captioned(c.words, c.attention.numpy()) for c in decoded]  # (len(words), L) per image


class WandbAttentionTable(pl.Callback):
    """Logs ``key`` as a ``wandb.Table`` with columns :data:`COLUMNS` after every validation epoch, and
    the overlays alone as ``<key>_overlays``.

    ``num_images``: how many val images (the first ones of the split); ``ncols``/``panel`` (pixels): the
    overlay grid layout, as in :func:`captioning.inference.viz.attention_figure`.
    """

    def __init__(self, num_images: int = 8, key: str = "val/attention", ncols: int = 5, panel: int = 120):
        super().__init__()
        if num_images < 1:
            raise ValueError(f"WandbAttentionTable: num_images must be >= 1, got {num_images}")
        self.num_images, self.key = num_images, key
        self.ncols, self.panel = ncols, panel
        self._examples: list[Example] | None = None

    def rows(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> list[list]:
        """One table row per example: [image_id, epoch, caption, references, overlay (H, W, 3) uint8]."""
        if self._examples is None:  # fixed at the first validation, so every epoch shows the same images
            loaders = trainer.val_dataloaders
            loader = loaders[0] if isinstance(loaders, (list, tuple)) else loaders
            self._examples = first_examples(loader.dataset, self.num_images)
        grid = (pl_module.net.grid_size, pl_module.net.grid_size)
        panels = pl_module.decoding["max_new_tokens"] + 1  # the same layout for every caption: one image size
        rows = []
        for ex, cap in zip(self._examples, caption_examples(pl_module, self._examples)):
            overlay = figure_array(
                ex.image, cap.tokens, cap.attention, grid, ncols=self.ncols, panel=self.panel, panels=panels
            )
            refs = "\n".join(ex.references)
            rows.append([ex.image_id, trainer.current_epoch, " ".join(cap.tokens), refs, overlay])
        return rows

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        logger = find_wandb_logger(trainer)
        # Rank 0 only: under DDP the other ranks hold a dummy experiment and would render for nothing.
        if logger is None or trainer.sanity_checking or not trainer.is_global_zero:
            return
        import wandb  # only needed once a WandbLogger exists

        stage_inside(logger.save_dir or trainer.default_root_dir)  # the table's files stay in the run folder

        rows = self.rows(trainer, pl_module)
        table = wandb.Table(columns=COLUMNS, data=[[*row[:4], wandb.Image(row[4])] for row in rows])
        # The table lives in a W&B artifact; the same overlays are also logged as plain media (one slider
        # per validation step in the UI, and files under the run directory's media/images/).
        overlays = [wandb.Image(row[4], caption=f"{row[0]}: {row[2]}") for row in rows]
        logger.log_metrics({self.key: table, f"{self.key}_overlays": overlays}, step=trainer.global_step)
