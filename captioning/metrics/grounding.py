"""Attention grounding on synthetic scenes: does the model look at the object it is naming?

For every generated object word (a size, colour or shape word) we find the scene object that the
caption's phrase describes, take the attention peak for that word, map the centre of the peak cell
to pixel coordinates and count a hit when it falls inside the object's bounding box.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from captioning.metrics.scenes import SceneBatch, SceneMetric
from captioning.scenes import COLORS as _COLORS
from captioning.scenes import SHAPES as _SHAPES
from captioning.scenes import SIZES as _SIZES
from captioning.scenes import SceneObject, scene_object  # SceneObject: the one scene-object type, re-exported

SHAPES = frozenset(_SHAPES)
COLORS = frozenset(_COLORS)
SIZES = frozenset(_SIZES)
OBJECT_WORDS = SHAPES | COLORS | SIZES
# Captions list objects as "a big red circle in the top left and a small blue square ...":
# each object's phrase ends at one of these tokens.
PHRASE_DELIMITERS = frozenset({"and", ",", ".", ";"})
NEEDS = ("shape", "color", "size", "box")  # what grounding reads of a scene object


@dataclass
class GroundingSample:
    """One generated caption with its attention and the scene it describes.

    ``attention[t]`` is the attention map (flattened row-major over the ``grid = (H, W)`` feature
    cells) used when ``tokens[t]`` was generated; extra trailing rows (e.g. the ``<end>`` step) are
    ignored. ``image_size`` is ``(W_img, H_img)`` in pixels, the frame of the object boxes.
    ``objects`` are :class:`~captioning.scenes.SceneObject` or mappings with keys ``shape, color, size, box``.
    """

    tokens: Sequence[str]
    attention: Any  # numpy array or torch tensor, (T, H*W)
    grid: tuple[int, int]
    image_size: tuple[int, int]
    objects: Sequence[SceneObject | Mapping[str, Any]]


def _to_numpy(attention: Any) -> np.ndarray:
    # torch tensors may live on a GPU or require grad; numpy() needs a detached CPU copy.
    if hasattr(attention, "detach"):
        attention = attention.detach().float().cpu().numpy()
    return np.asarray(attention, dtype=np.float64)


def split_phrases(tokens: Sequence[str]) -> list[list[int]]:
    """Token indices grouped into object phrases, split at ``and`` / punctuation (delimiters dropped)."""
    phrases: list[list[int]] = [[]]
    for i, tok in enumerate(tokens):
        if tok in PHRASE_DELIMITERS:
            phrases.append([])
        else:
            phrases[-1].append(i)
    return [p for p in phrases if p]


def attribute_of(word: str) -> str | None:
    """``"size"``, ``"color"`` or ``"shape"`` for an object word, ``None`` for any other word."""
    return "shape" if word in SHAPES else "color" if word in COLORS else "size" if word in SIZES else None


def match_phrase(words: Sequence[str], objects: Sequence[SceneObject]) -> int | None:
    """Index of the only object whose attributes agree with every size/colour/shape word of the phrase.

    ``None`` when no object or several objects agree (the word cannot be grounded unambiguously), or
    when the phrase gives two different values for one attribute ("red blue circle").
    """
    wanted: dict[str, str] = {}
    for word in words:
        attr = attribute_of(word)
        if attr is None:
            continue
        if wanted.setdefault(attr, word) != word:
            return None
    if not wanted:
        return None
    hits = [i for i, obj in enumerate(objects) if all(getattr(obj, a) == v for a, v in wanted.items())]
    return hits[0] if len(hits) == 1 else None


def peak_pixel(
    attention_row: np.ndarray, grid: tuple[int, int], image_size: tuple[int, int]
) -> tuple[float, float]:
    """Pixel ``(x, y)`` of the centre of the most attended cell (first one on ties, row-major)."""
    h, w = grid
    img_w, img_h = image_size
    cell = int(np.argmax(attention_row))
    row, col = divmod(cell, w)  # flattened index over (H, W), row-major
    return (col + 0.5) * img_w / w, (row + 0.5) * img_h / h


def _inside(x: float, y: float, box: tuple[float, float, float, float]) -> bool:
    x0, y0, x1, y1 = box
    return x0 <= x <= x1 and y0 <= y <= y1


def grounding_accuracy(samples: Sequence[GroundingSample]) -> dict[str, Any]:
    """Fraction of matched object words whose attention peak lies inside the named object's box.

    Returns ``{"grounding": hits / words, "words": words, "unmatched": n, "attribute_grounding":
    {"size": .., "color": .., "shape": ..}}`` where ``words`` counts the object words that could be
    matched to exactly one scene object, ``unmatched`` those that could not (excluded from the ratio),
    and ``attribute_grounding`` is the same ratio over the size, colour and shape words alone (a model
    can look at the object for its shape and beside it for its colour). Ratios are NaN when no word
    was matched. Box borders count as inside.
    """
    unmatched = 0
    per_attribute = {a: [0, 0] for a in ("size", "color", "shape")}  # attribute -> [hits, words]
    for k, sample in enumerate(samples):
        attention = _to_numpy(sample.attention)
        h, w = sample.grid
        tokens = list(sample.tokens)
        if attention.ndim != 2 or attention.shape[1] != h * w or attention.shape[0] < len(tokens):
            raise ValueError(
                f"sample {k}: attention has shape {attention.shape}, expected (T >= {len(tokens)} tokens, "
                f"H*W = {h}*{w} = {h * w}) for grid {sample.grid}"
            )
        objects = [scene_object(o, NEEDS) for o in sample.objects]
        for phrase in split_phrases(tokens):
            object_positions = [i for i in phrase if tokens[i] in OBJECT_WORDS]
            if not object_positions:
                continue
            target = match_phrase([tokens[i] for i in phrase], objects)
            if target is None:
                unmatched += len(object_positions)
                continue
            for i in object_positions:
                x, y = peak_pixel(attention[i], sample.grid, sample.image_size)
                counts = per_attribute[attribute_of(tokens[i])]
                counts[0] += _inside(x, y, objects[target].box)
                counts[1] += 1
    hits, total = (sum(column) for column in zip(*per_attribute.values()))  # every matched word has one
    return {
        "grounding": hits / total if total else math.nan,
        "words": total,
        "unmatched": unmatched,
        "attribute_grounding": {a: hit / n if n else math.nan for a, (hit, n) in per_attribute.items()},
    }


def grounding_samples(
    tokens: Sequence[Sequence[str]],
    attention: Sequence[Any],
    grid: tuple[int, int],
    image_sizes: Sequence[tuple[int, int]],
    scenes: Sequence[Sequence[Any]],
) -> list[GroundingSample]:
    """One :class:`GroundingSample` per caption (arguments as in captioning.metrics.scenes.score_scenes)."""
    return [
        GroundingSample(tokens=words, attention=maps, grid=grid, image_size=size, objects=scene)
        for words, maps, size, scene in zip(tokens, attention, image_sizes, scenes)
    ]


def format_grounding(result: Mapping[str, Any]) -> str:
    """``captioning evaluate``'s line for :func:`grounding_accuracy`'s result."""
    per = " ".join(f"{a} {v:.3f}" for a, v in result["attribute_grounding"].items())
    return (
        f"attention grounding: {result['grounding']:.4f} (fraction of {result['words']} object words whose "
        f"attention peak is inside the named object's box; {per}; {result['unmatched']} words could not be "
        "matched to one object)"
    )


def _compute(batch: SceneBatch, before: Mapping[str, float]) -> dict[str, Any]:
    samples = grounding_samples(batch.tokens, batch.attention, batch.grid, batch.image_sizes, batch.scenes)
    return grounding_accuracy(samples)


METRIC = SceneMetric(
    name="grounding", compute=_compute, value=lambda result: result["grounding"], format=format_grounding
)
