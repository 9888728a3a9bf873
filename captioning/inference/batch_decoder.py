"""The one batch decoder: a batch of images or of cached grids in, each image's captions out, checked.

    decoder = BatchDecoder.of(loaded_checkpoint)
    per_image = decoder.decode(batch, config, names)   # [[best, 2nd, ...], ...], one list per image

Everything that captions goes through :meth:`BatchDecoder.decode`: the Python API (``Captioner``, and so
``captioning caption`` and the demo), ``evaluate`` and ``tune`` (``captioning.inference.split_decoding``);
the caption bank encodes through :meth:`BatchDecoder.encode`. So a broken network fails the same way
everywhere: NaN/inf scores raise :class:`NonFiniteScores` naming the first image they hit, a batch whose
every caption is empty :class:`EmptyCaptions` naming the batch, both with the checkpoint.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from captioning.decoding import GenerationConfig, decode_captions
from captioning.decoding.captions import Caption, check_finite, check_not_all_empty
from captioning.decoding.search import hard_attention_layers

if TYPE_CHECKING:
    from collections.abc import Hashable, Sequence

    from captioning.checkpoints.load import LoadedCheckpoint
    from captioning.data.vocab import Vocab
    from captioning.inference.consensus import ConsensusReranker
    from captioning.models.caption_model import CaptionModel


def batch_label(names: Sequence[str]) -> str:
    """How an error names a whole batch: its one image, or its first image and how many others."""
    if len(names) == 1:
        return names[0]
    return f"{names[0]} and the {len(names) - 1} other images of its batch"


class BatchDecoder:
    """A network and its vocabulary decoding batches. ``checkpoint`` is what errors name (the file);
    ``bf16`` decodes under bfloat16 autocast."""

    def __init__(self, net: CaptionModel, vocab: Vocab, checkpoint: object = None, bf16: bool = False):
        self.net, self.vocab, self.checkpoint, self.bf16 = net, vocab, checkpoint, bf16

    @classmethod
    def of(cls, loaded: LoadedCheckpoint, bf16: bool = False) -> BatchDecoder:
        return cls(loaded.net, loaded.vocab, loaded.path, bf16)

    def generation_config(
        self, stored: GenerationConfig | dict | None, options: dict, label: object = None, prefix: str = ""
    ) -> GenerationConfig:
        """The ``stored`` decoding (the checkpoint's) with ``options`` changed (``None`` keeps a value).
        ``hard_attention`` is refused for a model none of whose attention layers chooses a cell (soft
        attention): it would change nothing. The error names ``label`` (default: the checkpoint) and the
        option as ``prefix`` + its name (``decoding.`` for a config key)."""
        context = options.get("hard_attention")
        if context is not None and not hard_attention_layers(self.net.decoder):
            raise ValueError(
                f"{label or self.checkpoint}: {prefix}hard_attention={context!r}: this model's attention is "
                "soft (no layer chooses one cell), so the option would change nothing; it applies to "
                "hard-attention models only"
            )
        if not isinstance(stored, GenerationConfig):
            stored = GenerationConfig.from_dict(stored)
        return stored.replace(**options)

    @property
    def device(self) -> torch.device:
        return next(self.net.parameters()).device

    def _autocast(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16) if self.bf16 else nullcontext()

    @torch.no_grad()
    def encode(self, batch: Tensor, cached: bool = False) -> Tensor:
        """``batch`` (B, 3, S, S) images, or with ``cached`` (B, L, D) features a feature cache stored for
        this encoder, as the decoder reads them: (B, L, D)."""
        with self._autocast():
            return self._features(batch.to(self.device), cached)

    def _features(self, batch: Tensor, cached: bool) -> Tensor:
        return self.net.encode_batch({"features" if cached else "images": batch})  # (B, L, D)

    @torch.no_grad()
    def decode(
        self,
        batch: Tensor,
        config: GenerationConfig,
        names: Sequence[str],
        *,
        cached: bool = False,
        generator: torch.Generator | None = None,
        reranker: ConsensusReranker | None = None,
        image_ids: Sequence[Hashable] | None = None,
    ) -> list[list[Caption]]:
        """Per image of ``batch`` (see :meth:`encode`; ``names`` one per image, for errors): its captions,
        best first (``config.num_return_sequences`` of them). With a ``reranker``: the caption its vote
        keeps, then every other distinct candidate in the decoders' order (``image_ids``: the bank images
        each image may not vote with, itself when it is in the bank).

        Checked before anything is returned (never printed, scored or voted on): every candidate's score
        finite (:class:`NonFiniteScores` naming the image), not every candidate of the batch empty
        (:class:`EmptyCaptions` naming :func:`batch_label`)."""
        if len(names) != batch.shape[0]:
            raise ValueError(f"decode: {len(names)} names for a batch of {batch.shape[0]}")
        batch = batch.to(self.device)
        with self._autocast():
            if reranker is None:
                inputs = {"features": batch} if cached else {"inputs": batch}
                decoded = decode_captions(self.net, self.vocab, config=config, generator=generator, **inputs)
                n = config.num_return_sequences
                per_image = [
                    decoded[i * n : (i + 1) * n] for i in range(len(names))
                ]  # an image's rows adjacent
            else:
                per_image = self._reranked(batch, cached, config, reranker, names, image_ids)
        for name, captions in zip(names, per_image):
            check_finite(captions, name, self.checkpoint)
        check_not_all_empty(
            [c for captions in per_image for c in captions], batch_label(names), self.checkpoint, config
        )
        return per_image

    def _reranked(self, batch, cached, config, reranker, names, image_ids) -> list[list[Caption]]:
        features = self._features(batch, cached)  # (B, L, D)
        options = reranker.candidates(self.net.decoder, features, self.vocab, config)
        for name, image_options in zip(names, options):
            check_finite(
                image_options, name, self.checkpoint
            )  # a broken model's candidates are never voted on
        out = []
        for kept, image_options in zip(reranker.choose(options, features, image_ids), options):
            distinct = {" ".join(kept.words): kept}
            for c in image_options:
                distinct.setdefault(" ".join(c.words), c)
            out.append(list(distinct.values()))
        return out
