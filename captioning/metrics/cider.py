"""CIDEr-D (Vedantam et al. 2015) as a fast per-caption reward for self-critical training.

pycocoevalcap's ``Cider`` (the coco-caption toolkit's CIDEr-D: tf-idf n-gram vectors for n = 1..4,
clipped hypothesis counts, a Gaussian length penalty with σ = 6, ×10) recomputes the document
frequencies of the references it is given, at every call. A reward needs them fixed (Rennie et al.
2017 take them from the training references) and needs thousands of captions scored per second, so
here everything that depends on the references alone is computed **once**, when ``CiderD`` is built:
the document frequencies, and per reference its tf-idf vectors (n-gram -> weight), norms and length.
Scoring a caption then costs one pass over its own ≤ 4·T n-grams against each of its image's
references. ``CiderD(refs).corpus_score(hyps)`` equals pycocoevalcap's ``Cider().compute_score`` (tested
to 4 decimals on the official demo files; the toolkit's document frequencies are those of the same refs).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

Vector = list[dict[tuple[str, ...], float]]  # per n: n-gram -> tf-idf weight
Weighted = tuple[Vector, np.ndarray, int]  # tf-idf vectors, their norms (n,), the caption's length


def ngram_counts(words: Sequence[str], n: int = 4) -> list[Counter]:
    """Per order 1..n, the n-gram counts of a token list."""
    return [Counter(tuple(words[i : i + k]) for i in range(len(words) - k + 1)) for k in range(1, n + 1)]


class CiderD:
    """``references[i]``: the reference captions of image i (tokenised strings, space-separated)."""

    def __init__(self, references: Sequence[Sequence[str]], n: int = 4, sigma: float = 6.0):
        self.n, self.sigma = n, sigma
        counts = [[ngram_counts(r.split(), n) for r in refs] for refs in references]
        self.df: Counter = Counter()
        for image in counts:  # an n-gram counts once per image, whatever its references
            self.df.update({g for ref in image for order in ref for g in order})
        self.log_images = math.log(float(len(references)))
        self.refs = [[self._vector(ref) for ref in image] for image in counts]

    def vector(self, caption: str) -> Weighted:
        """A caption's tf-idf vectors under these document frequencies (for ``similarity``)."""
        return self._vector(ngram_counts(caption.split(), self.n))

    def _vector(self, counts: list[Counter]) -> Weighted:
        """tf-idf vectors, their norms (n,) and the caption length (number of unigrams)."""
        vec: Vector = []
        norms = np.zeros(self.n)
        for k, order in enumerate(counts):
            weights = {
                g: tf * (self.log_images - math.log(max(1.0, self.df.get(g, 0.0)))) for g, tf in order.items()
            }
            vec.append(weights)
            norms[k] = math.sqrt(sum(w * w for w in weights.values()))
        return vec, norms, sum(counts[0].values())

    def score(self, hypothesis: str, image: int) -> float:
        """CIDEr-D of one caption against the references of image ``image``."""
        hyp = self.vector(hypothesis)
        refs = self.refs[image]
        return sum(self.similarity(hyp, ref) for ref in refs) / max(len(refs), 1)

    def similarity(self, hyp: Weighted, ref: Weighted) -> float:
        """CIDEr-D of one caption against one reference, both from ``vector``: the mean over n of the
        clipped cosine of their n-gram tf-idf vectors, times the Gaussian length penalty, ×10."""
        (h, h_norm, h_len), (r, r_norm, r_len) = hyp, ref
        penalty = math.exp(-((h_len - r_len) ** 2) / (2 * self.sigma**2))
        total = 0.0
        for k in range(self.n):
            r_k = r[k]
            dot = sum(min(w, r_k[g]) * r_k[g] for g, w in h[k].items() if g in r_k)  # clipped counts
            if h_norm[k] and r_norm[k]:
                dot /= h_norm[k] * r_norm[k]
            total += dot * penalty
        return total / self.n * 10.0

    def scores(self, hypotheses: Sequence[str], images: Sequence[int]) -> np.ndarray:
        """(N,) CIDEr-D of ``hypotheses[j]`` against the references of ``images[j]``."""
        return np.array([self.score(h, i) for h, i in zip(hypotheses, images)], dtype=np.float64)

    def corpus_score(self, hypotheses: Sequence[str]) -> float:
        """The toolkit's corpus CIDEr-D: the mean over images, one hypothesis per image."""
        return float(self.scores(hypotheses, range(len(hypotheses))).mean())
