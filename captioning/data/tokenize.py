"""Download-free tokenisation, identical for training captions, references and generated text."""

from __future__ import annotations

import re
import unicodedata

# Words are runs of letters/digits in any script ([^\W_]: \w without the underscore), with inner
# apostrophes; every other visible character is its own token, so "dog's ball." -> ["dog's", "ball", "."]
# and "Ein Mädchen läuft." -> ["ein", "mädchen", "läuft", "."]. Punctuation is then dropped for captions.
_TOKEN = re.compile(r"[^\W_]+(?:'[^\W_]+)*|[^\s\w]|_")
# Typographic apostrophes read as the ASCII one ("man’s" is "man's"), before the split.
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u02bc": "'", "\u2018": "'"})


def tokenize(text: str, keep_punctuation: bool = False) -> list[str]:
    """Lowercase ``text`` and split it into word tokens (punctuation removed unless asked for).

    The text is put in Unicode NFC first, so an accent typed as a combining mark joins its letter
    ("a" + U+0308 is "ä", one word character) instead of splitting the word."""
    text = unicodedata.normalize("NFC", text).translate(_APOSTROPHES).lower()
    tokens = _TOKEN.findall(text)
    if keep_punctuation:
        return tokens
    return [t for t in tokens if t[0].isalnum()]
