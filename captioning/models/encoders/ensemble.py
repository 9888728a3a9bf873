"""The encoders of an ensemble whose members read different grids, run side by side as one encoder.

An ensemble of checkpoints that share one frozen encoder runs it once (``captioning.checkpoints.ensemble``).
Members that trained their own encoder (the encoder's last stages fine-tuned, another Lite variant) each
need their own grid: this encoder runs every distinct member encoder on the same images and concatenates
their grids along the feature axis,

    a_i = [a_i^(1); a_i^(2); ...]        (B, L, D_1 + D_2 + ...)

so the rest of the pipeline (feature caches, batch decoding, reranking, overlays) still sees one (B, L, D)
grid, and each member decoder reads its own slice of it (``FeatureSlice`` in
``captioning.models.decoders.ensemble``). The grids must have the same L cells over the same image (one
input size, one ``grid_size``): the members' attention maps are averaged cell by cell.

Each member normalises its own input with its own ``mean``/``std`` (``ImageEncoder.encode``); this
encoder's ``mean``/``std`` are the first member's, kept only because an encoder's identity names them
(``captioning.hashing.encoder_identity``; its ``structure`` and ``weights_sha256`` cover every member).
Assembled at load time for inference: it is never trained, saved or built from a config.

A caption bank (consensus reranking's nearest training photos) pools this grid as one vector, so its
cosine similarity weighs each encoder's part by that part's share of the vector's norm: members of one
family (Lite1 frozen and fine-tuned: head features of like scale) count about equally.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

import torch
from torch import Tensor, nn


class EnsembleEncoder(nn.Module):
    def __init__(self, encoders: Sequence[nn.Module]):
        super().__init__()
        if len(encoders) < 2:
            raise ValueError(f"an ensemble encoder joins at least 2 encoders, got {len(encoders)}")
        grids = {int(e.grid_size) for e in encoders}
        if len(grids) != 1:
            raise ValueError(
                "the encoders of an ensemble must give the same grid; got grid_size "
                + ", ".join(str(int(e.grid_size)) for e in encoders)
            )
        self.encoders = nn.ModuleList(encoders)
        self.grid_size = grids.pop()
        self.widths = tuple(int(e.out_dim) for e in encoders)  # D_m of each encoder, in order
        self.out_dim = sum(self.widths)
        self.mean, self.std = encoders[0].mean, encoders[0].std  # see the module docstring

    def slices(self) -> list[tuple[int, int]]:
        """``(start, stop)`` of each encoder's grid on the feature axis of ``encode``'s output."""
        stops = list(accumulate(self.widths))
        return [(stop - width, stop) for width, stop in zip(self.widths, stops)]

    def encode(self, images: Tensor) -> Tensor:
        """(B, 3, H, W) images in [0, 1] -> (B, L, ΣD_m): each encoder's grid, side by side."""
        return torch.cat([e.encode(images) for e in self.encoders], dim=-1)  # (B, L, D_1 + D_2 + ...)

    def forward(self, images: Tensor) -> Tensor:
        return self.encode(images)
