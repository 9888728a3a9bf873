"""A caption bank: the training images' pooled encoder grids beside their reference captions.

Nearest-neighbour captioning (Devlin et al. 2015, "Exploring nearest neighbor approaches for image
captioning") describes a new image by what people said about the training images that look most like
it. Here "look like" is the cosine between mean-pooled encoder grids, v = mean_i a_i / ‖mean_i a_i‖
(the grid a_i is what the decoder attends over), and the bank answers one question: the reference
captions of the k training images nearest to each query grid. ``consensus.py`` uses them as
pseudo-references to rerank a captioner's candidates.

The bank is built with the captioner's own encoder (the feature cache's grids for a frozen one), so
its vectors and the queries come from one function of the pixels; a saved bank (``save`` / ``load``,
a safetensors file) records that encoder's identity, and ``check_encoder`` refuses another.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path

import torch
from torch import Tensor

from captioning import progress
from captioning.data.sources import CaptionSource
from captioning.data.tokenize import tokenize
from captioning.writes import BANK, BANK_KEY, Output, output


def pooled(features: Tensor) -> Tensor:
    """(B, L, D) grids -> (B, D) unit vectors: the mean over the L cells, L2-normalised."""
    return torch.nn.functional.normalize(features.float().mean(dim=1), dim=-1)  # (B, D)


class CaptionBank:
    """``vectors[j]`` (D,) and ``captions[j]`` (tokenised references) of bank image j."""

    def __init__(
        self,
        vectors: Tensor,
        captions: Sequence[Sequence[str]],
        image_ids: Sequence[Hashable],
        encoder: dict | None = None,
        *,
        origin: str = "caption bank",
    ):
        """``origin`` names where the bank comes from in the errors (``load`` gives the file)."""
        if not isinstance(vectors, Tensor) or vectors.dim() != 2 or vectors.shape[1] == 0:
            shape = tuple(vectors.shape) if isinstance(vectors, Tensor) else type(vectors).__name__
            raise ValueError(
                f"{origin}: vectors of shape {shape}; expected a 2-D (images, D) tensor with D >= 1, one "
                "pooled grid per image"
            )
        if isinstance(captions, str | bytes) or isinstance(image_ids, str | bytes):
            raise ValueError(f"{origin}: captions and image ids must be lists; expected one entry per image")
        if not (len(vectors) == len(captions) == len(image_ids)):
            raise ValueError(
                f"{origin}: {len(vectors)} vectors, {len(captions)} caption lists and {len(image_ids)} "
                "image ids; expected one of each per image"
            )
        if len(vectors) == 0:
            raise ValueError(f"{origin}: no images; expected the training split's images")
        self.vectors = vectors.float()  # (N, D) unit rows
        self._moved: dict[torch.device, Tensor] = {}  # vectors_like's copies
        _check_rows(self.vectors, origin)
        self.captions = [_checked_captions(c, j, origin) for j, c in enumerate(captions)]
        for j, image_id in enumerate(image_ids):
            if not isinstance(image_id, str | int) or isinstance(image_id, bool):  # what JSON keeps as it is
                raise ValueError(
                    f"{origin}: image id {image_id!r} of row {j}; expected a string or an integer"
                )
        self.image_ids = list(image_ids)
        if encoder is not None and not (
            isinstance(encoder, dict) and encoder and all(isinstance(k, str) for k in encoder)
        ):
            raise ValueError(
                f"{origin}: encoder identity {encoder!r}; expected the non-empty mapping of "
                "encoder_identity (the encoder the vectors come from), or None"
            )
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
    ) -> CaptionBank:
        """Every image of ``source``: ``inputs(i)`` (an image tensor or a cached grid) through ``encode``
        (the captioner's ``net.encode``), pooled; its captions tokenised as the CIDEr-D reward does."""
        vectors = []
        with torch.no_grad():
            for start in progress.batches(len(source), batch_size, "caption bank"):
                rows = [inputs(i) for i in range(start, min(start + batch_size, len(source)))]
                vectors.append(pooled(encode(torch.stack(rows))))  # (b, D)
        captions = [
            [t for t in (" ".join(tokenize(c)) for c in source.captions(i)) if t] for i in range(len(source))
        ]
        ids = [source.image_id(i) for i in range(len(source))]
        return cls(torch.cat(vectors), captions, ids, encoder)

    def save(self, path: str | Path | Output) -> None:
        """A safetensors file: the vectors (float16) and, in its header, the captions, ids and encoder.

        Written atomically through ``captioning.writes``: never over a checkpoint, an export, a folder
        or a device (an earlier bank is replaced); an ``Output`` from the caller adds its own checks
        (the command's inputs)."""
        from safetensors.torch import save as serialise

        out = path if isinstance(path, Output) else output(path, "the caption bank", kind=BANK)
        if self.encoder is None:  # ``load`` would refuse the file: nothing could check the queries
            raise ValueError(
                f"{out.label}: not written: the bank has no encoder identity; expected one "
                "(CaptionBank.build(..., encoder=captioner.encoder_identity))"
            )
        meta = {"captions": self.captions, "image_ids": self.image_ids, "encoder": self.encoder}
        header = {BANK_KEY: json.dumps(meta)}
        data = serialise({"vectors": self.vectors.half().contiguous()}, header)  # bytes: no I/O yet
        # written by Python, whose OSError (a full disk) names the file; safetensors' own writer reports
        # it as a SafetensorError without a path
        with out.replacing() as temp, open(temp, "xb") as f:
            f.write(data)

    @classmethod
    def load(cls, path: str | Path) -> CaptionBank:
        """The bank ``save`` wrote; a file that is not one, or a malformed or broken one (NaN/inf or
        all-zero vectors, vectors not 2-D, captions that are not non-empty strings, no encoder identity)
        is one ValueError naming the file and what was expected."""
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(path), framework="pt") as f:
                meta = json.loads((f.metadata() or {})[BANK_KEY])
                vectors = f.get_tensor("vectors")
            captions, image_ids, encoder = meta["captions"], meta["image_ids"], meta["encoder"]
        except (OSError, SafetensorError, KeyError, TypeError, ValueError) as err:  # JSONDecodeError too
            raise ValueError(f"{path}: not a caption bank saved by CaptionBank.save ({err})") from None
        if not (isinstance(encoder, dict) and encoder):
            raise ValueError(
                f"{path}: the caption bank's encoder identity is {encoder!r}; expected the non-empty "
                "identity of the encoder it was built with (rebuild it with `captioning bank`)"
            )
        if not vectors.is_floating_point():
            raise ValueError(f"{path}: caption bank vectors of dtype {vectors.dtype}; expected floats")
        if not isinstance(captions, list) or not isinstance(image_ids, list):
            raise ValueError(
                f"{path}: the caption bank's captions and image_ids are {type(captions).__name__} and "
                f"{type(image_ids).__name__}; expected lists, one entry per image"
            )
        return cls(vectors.float(), captions, image_ids, encoder, origin=str(path))

    def check_encoder(self, identity: dict, name: str = "the captioner") -> None:
        """Refuse queries from an encoder other than the bank's (their cosines would mean nothing)."""
        if self.encoder is not None and self.encoder != identity:
            differ = sorted(
                k for k in set(identity) | set(self.encoder) if identity.get(k) != self.encoder.get(k)
            )
            raise ValueError(
                f"caption bank: built with another encoder than {name}'s (they differ in {', '.join(differ)}); "
                "build the bank with this captioner"
            )

    def cosines(self, features: Tensor) -> Tensor:
        """(B, N): the cosine of each query grid (B, L, D), pooled, with every bank image."""
        if features.shape[-1] != self.vectors.shape[-1]:
            raise ValueError(
                f"caption bank: queries have D={features.shape[-1]}, the bank D={self.vectors.shape[-1]}; "
                "expected grids of the encoder the bank was built with"
            )
        return pooled(features) @ self.vectors_like(features).T  # (B, D) @ (D, N)

    def vectors_like(self, features: Tensor) -> Tensor:
        """(N, D) the bank's vectors on ``features``' device (a GPU's queries are compared on the GPU; the
        bank loads on the CPU), moved once per device. float32, as ``pooled`` gives the queries."""
        moved = self._moved.get(features.device)
        if moved is None:
            moved = self._moved[features.device] = self.vectors.to(features.device)
        return moved

    def nearest(self, features: Tensor, k: int, exclude: Sequence[Hashable] | None = None) -> list[list[int]]:
        """Per query grid (B, L, D), the bank rows of its ``k`` nearest images, nearest first. A query's
        own image (``exclude[b]``, an image id) is never its neighbour: evaluating on the bank's split
        must not read the answers."""
        sim = self.cosines(features)  # (B, N)
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


def _check_rows(vectors: Tensor, origin: str) -> None:
    """Refuse rows with NaN/inf or all zeros: their cosines are NaN or 0 with every query, and a NaN
    row is silently never (or always) a neighbour."""
    broken = ~torch.isfinite(vectors).all(dim=1)
    zero = ~broken & (vectors == 0).all(dim=1)
    bad = broken | zero
    if bool(bad.any()):
        first = int(bad.nonzero()[0])
        raise ValueError(
            f"{origin}: {int(bad.sum())} of {len(vectors)} vectors are not pooled grids ({int(broken.sum())} "
            f"hold NaN/inf, {int(zero.sum())} are all zero; the first is row {first}); expected finite, "
            "non-zero rows (rebuild the bank with a healthy encoder)"
        )


def _checked_captions(captions: object, row: int, origin: str) -> list[str]:
    """Image ``row``'s captions: a list of one or more non-empty strings, else a ValueError."""
    if isinstance(captions, str | bytes) or not isinstance(captions, Sequence) or not captions:
        raise ValueError(
            f"{origin}: the captions of row {row} are {captions!r:.80}; expected a list of one or more "
            "caption strings"
        )
    for caption in captions:
        if not isinstance(caption, str) or not caption.strip():
            raise ValueError(f"{origin}: caption {caption!r:.80} of row {row}; expected a non-empty string")
    return list(captions)
