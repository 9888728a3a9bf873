"""The caption-metric interface: what ``captioning evaluate``, ``score`` and validation compute per name.

A :class:`TextMetric` computes one or more named corpus-level scores (0-1 scale) from tokenised references
and hypotheses (pycocoevalcap's format: image id -> list of space-joined token strings, one hypothesis per
image). The registry is ``captioning.metrics.names.TEXT_METRICS`` (name -> ``"module:attribute"``), so a
new caption metric is its module plus one line there (docs/design/extending.md). Scene metrics, which
also read attention and the scenes' objects, have their own interface (``captioning.metrics.scenes``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass

from captioning.metrics.names import TEXT_METRICS

Refs = dict[Hashable, list[str]]  # image id -> tokenised captions joined by spaces


def _available() -> str | None:
    return None


@dataclass(frozen=True)
class TextMetric:
    """``compute(references, hypotheses)`` -> ``{name: score}`` for every name in ``names`` (one pass may
    yield several: BLEU-1..4). ``unavailable()`` says why it cannot run on this machine (a missing Java or
    model files), else None; a metric that runs an ``external`` tool has its failures reported as skipped
    (with the reason) instead of ending the whole evaluation."""

    names: tuple[str, ...]
    compute: Callable[[Refs, Refs], Mapping[str, float]]
    unavailable: Callable[[], str | None] = _available
    external: bool = False


def text_metric(name: str) -> TextMetric:
    """The registered metric that computes ``name`` (its registry entry, loaded now)."""
    if name not in TEXT_METRICS:
        raise ValueError(f"unknown metric {name!r}; choose from {tuple(TEXT_METRICS)}")
    entry = TEXT_METRICS[name]
    if isinstance(entry, str):
        module, _, attribute = entry.partition(":")
        entry = getattr(importlib.import_module(module), attribute)
    if name not in entry.names:
        raise ValueError(f"TEXT_METRICS[{name!r}] computes {entry.names}; expected it to compute {name!r}")
    return entry
