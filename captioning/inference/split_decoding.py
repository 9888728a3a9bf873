"""Every image of a data split through the one batch decoder (``captioning.inference.batch_decoder``):
the captions ``evaluate`` and ``tune`` score, and the pooled grids of the caption bank.

    decoded = decode_source(loaded_checkpoint, source, {"num_beams": 3})   # -> SplitCaptions
    bank = build_caption_bank(loaded_checkpoint, train_source, feature_cache)

Images are read ``batch_size`` source indices at a time (:func:`source_batches`), as the model reads
them: the feature cache's grids for a frozen encoder when a cache is given, else the pixels. An
unreadable image is left out and reported (one line each), never the end of the split.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from captioning import progress
from captioning.checkpoints.load import LoadedCheckpoint
from captioning.data.datamodule import ImageLoader
from captioning.data.features import FeatureCache, encoder_identity
from captioning.data.images import ImageError
from captioning.data.sources import CaptionSource, RecordSource
from captioning.data.tokenize import tokenize
from captioning.data.verify import check_images
from captioning.decoding import GenerationConfig
from captioning.inference.batch_decoder import BatchDecoder
from captioning.inference.caption_bank import CaptionBank, pooled
from captioning.inference.consensus import ConsensusReranker
from captioning.writes import folder_problem


@dataclass
class SplitCaptions:
    """Generated captions of every image of a source, in source order, with their attention."""

    image_ids: list[Any]
    captions: list[str]
    tokens: list[list[str]]
    attention: list[np.ndarray]  # per image (T, L): the map used for each generated word
    grid: tuple[int, int]
    skipped: list[str] = field(default_factory=list)  # one line per unreadable image, not decoded
    indices: list[int] = field(default_factory=list)  # the source index of each decoded image

    def results(self) -> list[dict]:
        """The COCO results list ``[{"image_id", "caption"}]``."""
        return [{"image_id": i, "caption": c} for i, c in zip(self.image_ids, self.captions)]


def frozen_feature_cache(
    loaded: LoadedCheckpoint, cache_dir: str | Path | None, device: str = "cpu"
) -> FeatureCache | None:
    """The feature cache in ``cache_dir`` for a frozen encoder; None without a folder or for an encoder
    that trains (its grids change with its weights)."""
    encoder = loaded.net.encoder
    if cache_dir is None or any(p.requires_grad for p in encoder.parameters()):
        return None
    return FeatureCache(encoder, cache_dir, device=device)


def model_inputs(
    loaded: LoadedCheckpoint, source: CaptionSource, feature_cache: FeatureCache | None
) -> Callable[[int], torch.Tensor]:
    """Image i of ``source`` as the model reads it: its cached grid (``loaded.net.encode_features``) with a
    ``feature_cache``, else the image itself (``loaded.net.encode``)."""
    if feature_cache is not None:
        return feature_cache.features(source, loaded.image_size)
    return ImageLoader(source, loaded.image_size)


def readable_images(
    source: CaptionSource, feature_cache: FeatureCache | None, skipped: list[str]
) -> tuple[CaptionSource, list[int]]:
    """The images the model will read, as ``(subset, indices in source)``. A feature cache encodes a whole
    split before the first batch, so with one every image file is checked first, as training checks them
    (``captioning.data.verify.check_images``, its verdicts cached beside the features): the unreadable ones'
    lines go to ``skipped`` and the cache gets the others. Without a cache each image is read as it comes."""
    if feature_cache is None or not isinstance(source, RecordSource):
        return source, list(range(len(source)))  # synthetic scenes, views: nothing on disk to check
    # verdicts stored beside the features when that folder is writable; a read-only (shared) cache that
    # holds every grid still serves evaluation, its images checked afresh
    verdicts = None if folder_problem(feature_cache.cache_dir, keep=True) else feature_cache.cache_dir
    bad = check_images([r.path for r in source.records], verdicts)
    skipped.extend(bad[i] for i in sorted(bad))
    keep = [i for i in range(len(source)) if i not in bad]
    subset = RecordSource([source.records[i] for i in keep]) if bad and keep else source
    return subset, keep  # keep empty: nothing to read (source_batches yields nothing)


def source_batches(
    loaded: LoadedCheckpoint,
    source: CaptionSource,
    feature_cache: FeatureCache | None,
    batch_size: int,
    desc: str,
    skipped: list[str],
) -> Iterator[tuple[list[int], torch.Tensor]]:
    """``(indices, batch)`` for every ``batch_size`` source indices: (B, 3, S, S) images, or (B, L, D)
    cached grids with a ``feature_cache``. An unreadable image is left out, its line appended to
    ``skipped``; a batch with no readable image is not yielded."""
    subset, order = readable_images(source, feature_cache, skipped)  # order[p]: the source index of p
    if not order:
        return
    inputs = model_inputs(loaded, subset, feature_cache)
    for start in progress.batches(len(order), batch_size, desc):
        indices, rows = [], []
        for p in range(start, min(start + batch_size, len(order))):
            try:  # one unreadable image is reported and left out, not the end of the split
                rows.append(inputs(p))
                indices.append(order[p])
            except ImageError as err:
                skipped.append(str(err))
        if rows:
            yield indices, torch.stack(rows)


def decode_source(
    loaded: LoadedCheckpoint,
    source: CaptionSource,
    decoding: dict[str, Any],
    batch_size: int = 50,
    feature_cache: FeatureCache | None = None,
    reranker: ConsensusReranker | None = None,
    generator: torch.Generator | None = None,
) -> SplitCaptions:
    """Caption every image of ``source`` with ``generate(**decoding)`` (unset options: the library's
    defaults; callers pass the checkpoint's, combined); features come from the cache if given. With a
    ``reranker``, each image's caption is the one it chooses among the decoders' candidates (never voting
    with the image's own bank entry). ``generator`` draws the samples of ``do_sample`` (repeatable runs).
    A broken network (NaN/inf scores, a batch of empty captions) raises the decoder's ``BrokenOutput``
    naming the image and the checkpoint: it is never scored."""
    decoder, config = BatchDecoder.of(loaded), GenerationConfig.from_dict(decoding)
    decoded = SplitCaptions([], [], [], [], (loaded.net.grid_size, loaded.net.grid_size))
    desc = "decoding" if reranker is None else "decoding and reranking"
    for indices, batch in source_batches(loaded, source, feature_cache, batch_size, desc, decoded.skipped):
        ids = [source.image_id(i) for i in indices]
        per_image = decoder.decode(
            batch, config, [f"image {i}" for i in ids], cached=feature_cache is not None,
            generator=generator, reranker=reranker, image_ids=ids,
        )  # fmt: skip
        for i, image_id, captions in zip(indices, ids, per_image):
            caption = captions[0]  # the best (or the one the vote kept): one caption per image is scored
            decoded.indices.append(i)
            decoded.image_ids.append(image_id)
            decoded.captions.append(" ".join(caption.words))
            decoded.tokens.append(caption.words)
            decoded.attention.append(caption.attention.numpy())  # (T, L)
    return decoded


def build_caption_bank(
    loaded: LoadedCheckpoint,
    source: CaptionSource,
    feature_cache: FeatureCache | None,
    skipped: list[str] | None = None,
    batch_size: int = 250,
) -> CaptionBank:
    """The caption bank of ``source`` (a training split) seen through ``loaded``'s encoder (the batch
    decoder's ``encode``), with its identity.

    An unreadable image is left out of the bank (as training and evaluate skip it): one line per image
    is appended to ``skipped`` when given, else one warning names how many and the first."""
    decoder = BatchDecoder.of(loaded)
    lines: list[str] = []
    vectors, kept = [], []
    for indices, batch in source_batches(loaded, source, feature_cache, batch_size, "caption bank", lines):
        vectors.append(pooled(decoder.encode(batch, cached=feature_cache is not None)))  # (b, D)
        kept += indices
    if not kept:
        raise ValueError(
            f"the caption bank has no readable image ({len(lines)} of {len(source)} could not be read; "
            f"the first: {lines[0] if lines else 'none'})"
        )
    if skipped is not None:
        skipped.extend(lines)
    elif lines:
        warnings.warn(
            f"caption bank: skipped {len(lines)} unreadable images of {len(source)}; the first: {lines[0]}",
            stacklevel=2,
        )
    captions = [[t for t in (" ".join(tokenize(c)) for c in source.captions(i)) if t] for i in kept]
    return CaptionBank(
        torch.cat(vectors), captions, [source.image_id(i) for i in kept],
        encoder_identity(loaded.net.encoder, loaded.image_size),
    )  # fmt: skip
