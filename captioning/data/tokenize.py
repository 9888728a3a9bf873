"""Download-free tokenisation, identical for training captions, references and generated text."""

from __future__ import annotations

import re

# Words are runs of letters/digits (with inner apostrophes); every other visible character is its
# own token, so "dog's ball." -> ["dog's", "ball", "."]. Punctuation is then dropped for captions.
_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*|[^\sa-z0-9]")


def tokenize(text: str, keep_punctuation: bool = False) -> list[str]:
    """Lowercase ``text`` and split it into word tokens (punctuation removed unless asked for)."""
    tokens = _TOKEN.findall(text.lower())
    if keep_punctuation:
        return tokens
    return [t for t in tokens if t[0].isalnum()]
