"""Validation scores on synthetic scenes: object accuracy, grounding and their product, one call.

BLEU saturates on the scenes long before the captions bind every attribute to the right object, and it
says nothing about where a hard-attention decoder looks. These are the scores a synthetic run should be
judged and checkpointed by (``model.val_metrics`` names them, ``captioning/conf/scoring/synthetic.yaml`` monitors
``val/scene_score``):

    objects      object accuracy (captioning.metrics.objects): objects named right / scene objects
    grounding    attention grounding (captioning.metrics.grounding): matched object words whose
                 attention peak lies in the named object's box
    scene_score  objects x grounding: high only when the captions are right *and* the attention lands on
                 what they name. A caption set with no matchable object word has no grounding (NaN);
                 its scene_score is 0, since nothing it says was looked at.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from captioning.metrics.grounding import GroundingSample, grounding_accuracy
from captioning.metrics.objects import object_accuracy


def scene_scores(
    tokens: Sequence[Sequence[str]],
    attention: Sequence[Any],
    grid: tuple[int, int],
    image_sizes: Sequence[tuple[int, int]],
    scenes: Sequence[Sequence[Any]],
) -> dict[str, float]:
    """``objects``, ``grounding`` and ``scene_score`` of generated captions against their scenes.

    ``tokens[i]`` are caption i's words, ``attention[i]`` its (T, H*W) maps over the ``grid = (H, W)``
    cells, ``image_sizes[i]`` the ``(W, H)`` pixels of the frame its objects' boxes are in, and
    ``scenes[i]`` its objects (mappings or objects with ``shape, color, size, position, box``)."""
    if not len(tokens) == len(attention) == len(image_sizes) == len(scenes):
        raise ValueError(
            f"scene_scores: {len(tokens)} captions, {len(attention)} attention maps, {len(image_sizes)} image "
            f"sizes and {len(scenes)} scenes; expected one of each per image"
        )
    objects = object_accuracy([list(t) for t in tokens], scenes)["object_accuracy"]
    grounding = grounding_accuracy(grounding_samples(tokens, attention, grid, image_sizes, scenes))[
        "grounding"
    ]
    score = 0.0 if math.isnan(grounding) else objects * grounding
    return {"objects": objects, "grounding": grounding, "scene_score": score}


def grounding_samples(
    tokens: Sequence[Sequence[str]],
    attention: Sequence[Any],
    grid: tuple[int, int],
    image_sizes: Sequence[tuple[int, int]],
    scenes: Sequence[Sequence[Any]],
) -> list[GroundingSample]:
    """One :class:`GroundingSample` per caption (arguments as in :func:`scene_scores`)."""
    return [
        GroundingSample(
            tokens=words,
            attention=maps,
            grid=grid,
            image_size=size,
            objects=[_box_fields(o) for o in scene],
        )
        for words, maps, size, scene in zip(tokens, attention, image_sizes, scenes)
    ]


def _box_fields(obj: Any) -> dict[str, Any]:
    """What grounding reads of a scene object, from a mapping or an object with those attributes."""
    get = obj.__getitem__ if isinstance(obj, Mapping) else lambda k: getattr(obj, k)
    return {k: get(k) for k in ("shape", "color", "size", "box")}
