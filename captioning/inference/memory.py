"""A caption memory: the training images' pooled encoder grids beside their reference captions.

Nearest-neighbour captioning (Devlin et al. 2015, "Exploring nearest neighbor approaches for image
captioning") describes a new image by what people said about the training images that look most like
it. Here "look like" is the cosine between mean-pooled encoder grids, v = mean_i a_i / ‖mean_i a_i‖
(the grid a_i is what the decoder attends over), and the memory answers one question: the reference
captions of the k training images nearest to each query grid. ``consensus.py`` uses them as
pseudo-references to rerank a captioner's candidates.

The memory is built with the captioner's own encoder (the feature cache's grids for a frozen one), so
its vectors and the queries come from one function of the pixels; a saved memory (``save`` / ``load``,
a safetensors file) records that encoder's identity, and ``check_encoder`` refuses another.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path

import torch
from torch import Tensor

from captioning.data.sources import CaptionSource
from captioning.data.tokenize import tokenize


def pooled(grids: Tensor) -> Tensor:
    """(B, L, D) grids -> (B, D) unit vectors: the mean over the L cells, L2-normalised."""
    return torch.nn.functional.normalize(grids.float().mean(dim=1), dim=-1)  # (B, D)


class CaptionMemory:
    """``vectors[j]`` (D,) and ``captions[j]`` (tokenised references) of memory image j."""

    def __init__(
        self,
        vectors: Tensor,
        captions: Sequence[Sequence[str]],
        image_ids: Sequence[Hashable],
        encoder: dict | None = None,
    ):
        if not (len(vectors) == len(captions) == len(image_ids)):
            raise ValueError(
                f"caption memory: {len(vectors)} vectors, {len(captions)} caption lists and {len(image_ids)} "
                "image ids; expected one of each per image"
            )
        if len(vectors) == 0:
            raise ValueError("caption memory: no images; expected the training split's images")
        self.vectors = vectors.float()  # (N, D) unit rows
        self.captions = [list(c) for c in captions]
        self.image_ids = list(image_ids)
        self.encoder = encoder  # encoder_identity of the grids the vectors pool, when known

    def __len__(self) -> int:
        return len(self.image_ids)

    @classmethod
    def build(
        cls,
        encode: Callable[[Tensor], Tensor],
        inputs: Callable[[int], Tensor],
        source: CaptionSource,
        batch_size: int = 250,
        encoder: dict | None = None,
    ) -> CaptionMemory:
        """Every image of ``source``: ``inputs(i)`` (an image tensor or a cached grid) through ``encode``
        (the captioner's ``net.encode``), pooled; its captions tokenised as the CIDEr-D reward does."""
        vectors = []
        with torch.no_grad():
            for start in range(0, len(source), batch_size):
                rows = [inputs(i) for i in range(start, min(start + batch_size, len(source)))]
                vectors.append(pooled(encode(torch.stack(rows))))  # (b, D)
        captions = [[" ".join(tokenize(c)) for c in source.captions(i)] for i in range(len(source))]
        ids = [source.image_id(i) for i in range(len(source))]
        return cls(torch.cat(vectors), captions, ids, encoder)

    def save(self, path: str | Path) -> None:
        """A safetensors file: the vectors (float16) and, in its header, the captions, ids and encoder."""
        from safetensors.torch import save_file

        meta = {"captions": self.captions, "image_ids": self.image_ids, "encoder": self.encoder}
        save_file(
            {"vectors": self.vectors.half().contiguous()}, str(path), {"caption_memory": json.dumps(meta)}
        )

    @classmethod
    def load(cls, path: str | Path) -> CaptionMemory:
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(path), framework="pt") as f:
                meta = json.loads((f.metadata() or {})["caption_memory"])
                vectors = f.get_tensor("vectors").float()
            return cls(vectors, meta["captions"], meta["image_ids"], meta["encoder"])
        except (OSError, SafetensorError, KeyError, TypeError, ValueError) as err:  # JSONDecodeError too
            raise ValueError(f"{path}: not a caption memory saved by CaptionMemory.save ({err})") from None

    def check_encoder(self, identity: dict, name: str = "the captioner") -> None:
        """Refuse queries from an encoder other than the memory's (their cosines would mean nothing)."""
        if self.encoder is not None and self.encoder != identity:
            differ = sorted(
                k for k in set(identity) | set(self.encoder) if identity.get(k) != self.encoder.get(k)
            )
            raise ValueError(
                f"caption memory: built with another encoder than {name}'s (they differ in {', '.join(differ)}); "
                "build the memory with this captioner"
            )

    def cosines(self, grids: Tensor) -> Tensor:
        """(B, N): the cosine of each query grid (B, L, D), pooled, with every memory image."""
        if grids.shape[-1] != self.vectors.shape[-1]:
            raise ValueError(
                f"caption memory: queries have D={grids.shape[-1]}, the memory D={self.vectors.shape[-1]}; "
                "expected grids of the encoder the memory was built with"
            )
        return pooled(grids) @ self.vectors.T  # (B, D) @ (D, N)

    def nearest(self, grids: Tensor, k: int, exclude: Sequence[Hashable] | None = None) -> list[list[int]]:
        """Per query grid (B, L, D), the memory rows of its ``k`` nearest images, nearest first. A query's
        own image (``exclude[b]``, an image id) is never its neighbour: evaluating on the memory's split
        must not read the answers."""
        sim = self.cosines(grids)  # (B, N)
        if exclude is not None:
            where = {image_id: j for j, image_id in enumerate(self.image_ids)}
            for b, image_id in enumerate(exclude):
                if image_id in where:
                    sim[b, where[image_id]] = float("-inf")
        values, rows = sim.topk(min(k, len(self)), dim=-1)  # (B, k) nearest first
        return [
            [j for v, j in zip(vs, js) if v != float("-inf")]
            for vs, js in zip(values.tolist(), rows.tolist())
        ]
