"""Vocabulary: word <-> id, built from training captions, saved as plain JSON-able data."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

PAD, START, END, UNK = "<pad>", "<start>", "<end>", "<unk>"
SPECIALS = (PAD, START, END, UNK)


class Vocab:
    """Maps tokens to ids. Ids 0..3 are always ``<pad> <start> <end> <unk>``."""

    def __init__(self, words: Sequence[str]):
        if tuple(words[:4]) != SPECIALS:
            raise ValueError(f"a vocabulary must start with {SPECIALS}, got {tuple(words[:4])}")
        if len(set(words)) != len(words):
            raise ValueError("vocabulary words must be unique")
        self.itos: list[str] = list(words)
        self.stoi: dict[str, int] = {w: i for i, w in enumerate(self.itos)}

    pad_id, start_id, end_id, unk_id = 0, 1, 2, 3

    @classmethod
    def build(cls, tokenized_captions: Iterable[Sequence[str]], min_count: int = 1) -> Vocab:
        """Keep words seen at least ``min_count`` times; ties are broken alphabetically (deterministic)."""
        counts = Counter(tok for caption in tokenized_captions for tok in caption)
        kept = sorted(
            (w for w, c in counts.items() if c >= min_count and w not in SPECIALS),
            key=lambda w: (-counts[w], w),
        )
        return cls([*SPECIALS, *kept])

    def __len__(self) -> int:
        return len(self.itos)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and self.itos == other.itos

    def encode(self, tokens: Sequence[str], add_special: bool = True) -> list[int]:
        ids = [self.stoi.get(t, self.unk_id) for t in tokens]
        return [self.start_id, *ids, self.end_id] if add_special else ids

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Ids -> words, dropping ``<start>``/``<pad>`` and stopping at the first ``<end>``."""
        words = []
        for i in ids:
            i = int(i)
            if i == self.end_id:
                break
            if i in (self.pad_id, self.start_id):
                continue
            words.append(self.itos[i])
        return words

    def to_dict(self) -> dict:
        return {"itos": list(self.itos)}

    @classmethod
    def from_dict(cls, data: dict) -> Vocab:
        if not isinstance(data, dict) or not isinstance(data.get("itos"), list):
            raise ValueError("vocabulary data must be a dict with an 'itos' list of words")
        for i, word in enumerate(data["itos"]):  # a word is one output token: a string without whitespace
            if not isinstance(word, str) or not word or word != "".join(word.split()):
                raise ValueError(
                    f"vocabulary word {i} is {word!r:.40}; expected a non-empty string without whitespace"
                )
        return cls(data["itos"])


def vocabulary_difference(theirs: Sequence[str], mine: Sequence[str]) -> str:
    """How a saved vocabulary (``theirs``) differs from this run's (``mine``), for an error message: the
    sizes, whether the words are the same in another order, and the first id where they part."""
    first = next((i for i, (a, b) in enumerate(zip(theirs, mine)) if a != b), min(len(theirs), len(mine)))
    there = repr(theirs[first]) if first < len(theirs) else "nothing"
    here = repr(mine[first]) if first < len(mine) else "nothing"
    if sorted(theirs) == sorted(mine):
        kind = f"the same {len(mine)} words in another order"
    else:
        kind = f"{len(theirs)} words against this run's {len(mine)}"
    return f"{kind}, first apart at id {first} ({there} there, {here} here)"
