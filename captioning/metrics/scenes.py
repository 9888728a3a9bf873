"""Scene metrics: one interface, one registry, one scoring path for validation and ``captioning evaluate``.

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

Each is a :class:`SceneMetric` registered in ``captioning.metrics.names.SCENE_METRICS``. :func:`score_scenes`
computes every registered one on a :class:`SceneBatch`; the LightningModule logs ``val/<name>`` (its
``value``) for those ``val_metrics`` names, ``captioning evaluate`` stores each full result under its name in
scores.json and prints its ``format`` line. Adding one: docs/design/extending.md, "Adding a metric".
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from captioning.metrics.names import SCENE_METRICS
from captioning.scenes import SceneObject, scene_object


@dataclass(frozen=True)
class SceneBatch:
    """Everything a scene metric reads, per image i: the caption (``captions[i]``, its words
    ``tokens[i]``), its (T, H*W) attention maps over the ``grid = (H, W)`` cells, the ``(W, H)`` pixels of
    the frame its objects' boxes are in, and the scene's objects."""

    captions: Sequence[str]
    tokens: Sequence[Sequence[str]]
    attention: Sequence[Any]
    grid: tuple[int, int]
    image_sizes: Sequence[tuple[int, int]]
    scenes: Sequence[Sequence[SceneObject]]


@dataclass(frozen=True)
class SceneMetric:
    """A scene-level metric.

    ``compute(batch, before)`` returns its result (plain data: scores.json stores it) from a
    :class:`SceneBatch` and ``before``, the values of the metrics registered before it. ``value(result)``
    is the one number logged as ``val/<name>`` and monitored; ``format(result)`` the line ``captioning
    evaluate`` prints (None: no line)."""

    name: str
    compute: Callable[[SceneBatch, Mapping[str, float]], Any]
    value: Callable[[Any], float] = float
    format: Callable[[Any], str] | None = None
    higher_is_better: bool = True


def scene_metrics() -> list[SceneMetric]:
    """The registered scene metrics in registry order (an entry is a ``"module:attribute"`` string, loaded
    now, or the metric itself)."""
    metrics = []
    for name, entry in SCENE_METRICS.items():
        if isinstance(entry, str):
            module, _, attribute = entry.partition(":")
            entry = getattr(importlib.import_module(module), attribute)
        if entry.name != name:
            raise ValueError(f"SCENE_METRICS[{name!r}] is the metric named {entry.name!r}; expected one name")
        metrics.append(entry)
    return metrics


def score_scenes(
    captions: Sequence[str],
    tokens: Sequence[Sequence[str]],
    attention: Sequence[Any],
    grid: tuple[int, int],
    image_sizes: Sequence[tuple[int, int]],
    scenes: Sequence[Sequence[Any]],
) -> dict[str, Any]:
    """Every registered scene metric's result, by name: the one path of validation and ``evaluate``.

    ``scenes[i]`` are caption i's objects: :class:`~captioning.scenes.SceneObject` or mappings with
    ``shape, color, size, position, box`` (converted here, once)."""
    if not len(captions) == len(tokens) == len(attention) == len(image_sizes) == len(scenes):
        raise ValueError(
            f"scene_scores: {len(tokens)} captions, {len(attention)} attention maps, {len(image_sizes)} image "
            f"sizes and {len(scenes)} scenes; expected one of each per image"
            + ("" if len(captions) == len(tokens) else f" (and {len(captions)} caption strings)")
        )
    batch = SceneBatch(
        captions=list(captions),
        tokens=[list(t) for t in tokens],
        attention=list(attention),
        grid=grid,
        image_sizes=list(image_sizes),
        scenes=[[scene_object(o) for o in scene] for scene in scenes],
    )
    results: dict[str, Any] = {}
    values: dict[str, float] = {}
    for metric in scene_metrics():
        results[metric.name] = metric.compute(batch, dict(values))
        values[metric.name] = metric.value(results[metric.name])
    return results


def scene_values(results: Mapping[str, Any]) -> dict[str, float]:
    """The number of each result of :func:`score_scenes` (``val/<name>``)."""
    return {m.name: m.value(results[m.name]) for m in scene_metrics() if m.name in results}


def scene_scores(
    tokens: Sequence[Sequence[str]],
    attention: Sequence[Any],
    grid: tuple[int, int],
    image_sizes: Sequence[tuple[int, int]],
    scenes: Sequence[Sequence[Any]],
) -> dict[str, float]:
    """The value of every scene metric (``objects``, ``grounding``, ``scene_score``) of generated captions
    given as words (arguments as in :func:`score_scenes`)."""
    captions = [" ".join(words) for words in tokens]
    return scene_values(score_scenes(captions, tokens, attention, grid, image_sizes, scenes))


def _scene_score(batch: SceneBatch, before: Mapping[str, float]) -> float:
    if "objects" not in before or "grounding" not in before:
        raise ValueError("scene_score is objects x grounding: register both before it in SCENE_METRICS")
    grounding = before["grounding"]
    return 0.0 if math.isnan(grounding) else before["objects"] * grounding


SCENE_SCORE = SceneMetric(
    name="scene_score",
    compute=_scene_score,
    format=lambda score: f"scene score (objects right x attention grounding): {score:.4f}",
)
