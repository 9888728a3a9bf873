"""Decoding: free functions over the decoders' ``init_state / step`` interface.

``generate`` is the one batched search behind greedy decoding, beam search (with n-best lists) and
sampling, with HF ``generate``'s option names (``config.py``); ``decode_captions`` turns its ids into words.
"""

from captioning.decoding.captions import Caption, decode_captions
from captioning.decoding.config import GenerationConfig
from captioning.decoding.search import SearchOutput, beam_search, generate, greedy

__all__ = [
    "Caption",
    "GenerationConfig",
    "SearchOutput",
    "beam_search",
    "decode_captions",
    "generate",
    "greedy",
]
