"""Decoding: free functions over the decoders' ``init_state / step`` interface.

``generate`` is the one batched search behind greedy decoding, beam search (with n-best lists) and
sampling, with HF ``generate``'s option names (``config.py``); ``decode_captions`` turns its ids into words.

The names below load on first use: ``captioning.decoding.config`` (a dataclass, no torch) is read by the
command line's flags before torch is imported.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "Caption": "captions",
    "decode_captions": "captions",
    "GenerationConfig": "config",
    "SearchOutput": "search",
    "beam_search": "search",
    "generate": "search",
    "greedy": "search",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'captioning.decoding' has no attribute {name!r}")
    return getattr(importlib.import_module(f"captioning.decoding.{_WHERE[name]}"), name)
