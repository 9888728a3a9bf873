"""Decoding: free functions over the decoders' ``init_state / step`` interface.

``generate`` is the one batched search behind greedy decoding, beam search (with n-best lists) and
sampling, with HF ``generate``'s option names (``config.py``); ``decode_captions`` turns its ids into words.

The names below load on first use: ``captioning.decoding.config`` (a dataclass, no torch) is read by the
command line's flags before torch is imported.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the names are, for readers and type checkers (loaded on first use below)
    from captioning.decoding.captions import Caption, decode_captions
    from captioning.decoding.config import GenerationConfig
    from captioning.decoding.search import SearchOutput, beam_search, generate, greedy

_WHERE = {
    "Caption": "captions",
    "decode_captions": "captions",
    "GenerationConfig": "config",
    "SearchOutput": "search",
    "beam_search": "search",
    "generate": "search",
    "greedy": "search",
}
__all__ = [
    "Caption",
    "GenerationConfig",
    "SearchOutput",
    "beam_search",
    "decode_captions",
    "generate",
    "greedy",
]
assert sorted(__all__) == sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'captioning.decoding' has no attribute {name!r}")
    return getattr(importlib.import_module(f"captioning.decoding.{_WHERE[name]}"), name)
