"""Per-caption BLEU-n (Papineni et al. 2002) as the coco-caption toolkit scores one sentence: a reward.

pycocoevalcap's ``Bleu(4).compute_score`` returns, beside the corpus score, one BLEU-n per caption: the
geometric mean of its clipped n-gram precisions p_k = (matches_k + 1e-15) / (guesses_k + 1e-9) for
k = 1..n (the tiny constants keep a caption with no 4-gram match at ~0 instead of a division by zero),
times the brevity penalty exp(1 − r / c) when the caption (length c) is shorter than the reference r whose
length is closest to c (ties: the shorter). Matches are clipped by the most times any one reference has the
n-gram. That per-caption score is what self-critical recipes mix into their reward
(``bleu_reward_weight`` of ruotianluo/self-critical.pytorch); here the references' clipping counts and
lengths are computed once, when ``SentenceBleu`` is built, as ``CiderD`` does its tf-idf vectors, and the
scores equal the toolkit's per-caption list (tests/metrics/test_sentence_bleu.py).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from captioning.metrics.cider import ngram_counts

TINY, SMALL = 1e-15, 1e-9  # pycocoevalcap bleu_scorer.py's smoothing of a zero precision


class SentenceBleu:
    """``references[i]``: the reference captions of image i (tokenised strings, space-separated)."""

    def __init__(self, references: Sequence[Sequence[str]], n: int = 4):
        self.n = n
        self.refs: list[tuple[Counter, list[int]]] = []
        for refs in references:
            most: Counter = Counter()  # n-gram (any order) -> the most times one reference has it
            for ref in refs:
                for order in ngram_counts(ref.split(), n):
                    most |= order  # Counter union keeps the max count
            self.refs.append((most, [len(ref.split()) for ref in refs]))

    def score(self, hypothesis: str, image: int) -> float:
        """BLEU-n of one caption against the references of image ``image`` (0-1 scale)."""
        words = hypothesis.split()
        most, lengths = self.refs[image]
        precision = 1.0
        for k, order in enumerate(ngram_counts(words, self.n), start=1):
            matches = sum(min(count, most[g]) for g, count in order.items() if g in most)
            precision *= (matches + TINY) / (max(len(words) - k + 1, 0) + SMALL)
        bleu = precision ** (1.0 / self.n)
        closest = min(lengths, key=lambda length: (abs(length - len(words)), length))
        ratio = (len(words) + TINY) / (closest + SMALL)
        return bleu * math.exp(1.0 - 1.0 / ratio) if ratio < 1.0 else bleu

    def scores(self, hypotheses: Sequence[str], images: Sequence[int]) -> np.ndarray:
        """(N,) BLEU-n of ``hypotheses[j]`` against the references of ``images[j]``."""
        return np.array([self.score(h, i) for h, i in zip(hypotheses, images)], dtype=np.float64)
