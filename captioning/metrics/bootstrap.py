"""Paired bootstrap confidence intervals for differences in corpus BLEU-4 and CIDEr-D between systems.

Two systems captioned the same images; is one really better, or is the difference the luck of which
images the split holds? Resample the images with replacement (Koehn 2004; Efron & Tibshirani 1993),
recompute each corpus metric on the resample for both systems, and read the interval of the difference
off its percentiles. Paired: both systems are scored on the same resample, so the images' difficulty
cancels.

Corpus metrics are not means over images, so each image keeps *sufficient statistics* from which the
corpus score of any resample is rebuilt exactly:
- BLEU-4 (Papineni et al. 2002, as pycocoevalcap computes it: brevity against the closest reference
  length): per image the hypothesis length, the chosen reference length, and for n = 1..4 the clipped
  matches and the n-gram count. Corpus BLEU-4 = BP · (Π_n Σmatches_n / Σcount_n)^(1/4), with
  BP = exp(1 - r/c) when c < r (c, r: summed hypothesis and reference lengths). ``Bleu_4_nobp`` is the
  same without BP, as Xu et al. (2015) report BLEU (their Table 1 footnote): it cannot punish captions
  shorter than the references, so it favours systems that write short captions.
- CIDEr-D (Vedantam et al. 2015): a mean of per-image scores, with the document frequencies of the whole
  reference set (held fixed under resampling: the standard, slightly conservative choice).

The statistics come from pycocoevalcap's own scorers, and the test checks the full-set values equal
``Bleu().compute_score`` / ``Cider().compute_score`` exactly.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from pycocoevalcap.bleu.bleu_scorer import BleuScorer
from pycocoevalcap.cider.cider import Cider

_TINY, _SMALL = 1e-15, 1e-9  # pycocoevalcap's guards against empty counts (bleu_scorer.py)
BOOTSTRAP_METRICS = ("Bleu_4", "Bleu_4_nobp", "CIDEr")  # what paired_bootstrap can resample


@dataclass(frozen=True)
class ImageStats:
    """Per-image sufficient statistics of one system on one image set (rows in ``ids`` order)."""

    ids: tuple[Hashable, ...]
    hyp_len: np.ndarray  # (N,) hypothesis length in tokens
    ref_len: np.ndarray  # (N,) the reference length closest to it
    matches: np.ndarray  # (N, 4) clipped n-gram matches, n = 1..4
    counts: np.ndarray  # (N, 4) n-grams in the hypothesis
    cider: np.ndarray  # (N,) CIDEr-D of each image (toolkit scale: 0-10)

    def bleu4(self, index: np.ndarray | None = None, brevity: bool = True) -> float:
        """Corpus BLEU-4 of the images at ``index`` (all when None; repeats count, as in a resample);
        ``brevity=False``: without the brevity penalty (Xu et al.'s BLEU)."""
        arrays = (a if index is None else a[index] for a in self._bleu_arrays())
        return float(_bleu4(*arrays, brevity=brevity)[0])

    def length_ratio(self) -> float:
        """c / r: the hypotheses' summed length over the closest references' (BP < 1 below 1)."""
        return float(self.hyp_len.sum() / max(self.ref_len.sum(), _SMALL))

    def _bleu_arrays(self) -> tuple[np.ndarray, ...]:
        return self.hyp_len, self.ref_len, self.matches, self.counts

    def take(self, rows: np.ndarray) -> ImageStats:
        """The images at ``rows`` (in that order), e.g. half of the split or another system's order."""
        return ImageStats(
            tuple(self.ids[k] for k in rows),
            *(x[rows] for x in (self.hyp_len, self.ref_len, self.matches, self.counts, self.cider)),
        )


def _bleu4(
    hyp_len: np.ndarray, ref_len: np.ndarray, matches: np.ndarray, counts: np.ndarray, brevity: bool = True
) -> np.ndarray:
    """Corpus BLEU-4 from statistics summed over the image axis -2 (leading axes: resamples)."""
    c, r = hyp_len.sum(-1), ref_len.sum(-1)  # (...,)
    precisions = (matches.sum(-2) + _TINY) / (counts.sum(-2) + _SMALL)  # (..., 4)
    bleu = np.prod(precisions, axis=-1) ** 0.25  # geometric mean of p_1..p_4
    if not brevity:
        return np.atleast_1d(bleu)
    ratio = (c + _TINY) / (r + _SMALL)
    brevity = np.where(ratio < 1, np.exp(1 - 1 / np.maximum(ratio, _TINY)), 1.0)
    return np.atleast_1d(bleu * brevity)


def image_stats(
    references: Mapping[Hashable, Sequence[str]], hypotheses: Mapping[Hashable, str]
) -> ImageStats:
    """Statistics of ``hypotheses`` (id -> one tokenised caption) against ``references`` (id -> tokenised
    captions), both already tokenised as the toolkit does (``captioning.metrics.coco.tokenize_captions``)."""
    missing = sorted(map(str, set(references) - set(hypotheses)))
    if missing:
        raise ValueError(f"{len(missing)} images have references but no hypothesis, e.g. {missing[:3]}")
    ids = tuple(references)
    scorer = BleuScorer(n=4)
    for i in ids:
        scorer += (hypotheses[i], list(references[i]))
    rows = []
    for cooked in scorer.ctest:  # cook_test's per-sentence counts; reference lengths chosen as "closest"
        ref = min((abs(length - cooked["testlen"]), length) for length in cooked["reflen"])[1]
        rows.append((cooked["testlen"], ref, cooked["correct"], cooked["guess"]))
    hyp_len, ref_len, matches, counts = (np.array(col, dtype=np.float64) for col in zip(*rows))
    _, cider = Cider().compute_score({i: list(references[i]) for i in ids}, {i: [hypotheses[i]] for i in ids})
    return ImageStats(ids, hyp_len, ref_len, matches, counts, np.asarray(cider, dtype=np.float64))


@dataclass(frozen=True)
class Difference:
    """``b - a`` on the full set and its paired-bootstrap percentile interval."""

    metric: str
    a: float
    b: float
    delta: float
    low: float
    high: float
    p_b_not_better: float  # fraction of resamples with delta <= 0 (one-sided bootstrap p for "b > a")
    resamples: int
    confidence: float

    @property
    def significant(self) -> bool:
        """The interval excludes 0."""
        return self.low > 0 or self.high < 0


def _aligned(a: ImageStats, b: ImageStats) -> ImageStats:
    if a.ids == b.ids:
        return b
    if set(a.ids) != set(b.ids):
        raise ValueError(f"paired bootstrap needs the same images: {len(set(a.ids) ^ set(b.ids))} ids differ")
    order = {i: k for k, i in enumerate(b.ids)}
    return b.take(np.array([order[i] for i in a.ids]))


def _checked(caller: str, metrics: Sequence[str], resamples: int, confidence: float) -> None:
    unknown = [m for m in metrics if m not in BOOTSTRAP_METRICS]
    if unknown:
        raise ValueError(f"{caller}: unknown metric {unknown[0]!r}; expected {', '.join(BOOTSTRAP_METRICS)}")
    if resamples < 100:
        raise ValueError(f"resamples={resamples}: expected >= 100 for a percentile interval")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence}: expected a value in (0, 1)")


def _corpus(metric: str, stats: ImageStats) -> float:
    """The full-set corpus score of ``metric``."""
    return stats.bleu4(brevity=metric == "Bleu_4") if metric.startswith("Bleu") else float(stats.cider.mean())


def _difference(metric: str, full: tuple[float, float], deltas: np.ndarray, confidence: float) -> Difference:
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(deltas, [tail, 100 - tail])
    return Difference(
        metric, full[0], full[1], full[1] - full[0], float(low), float(high),
        float(np.mean(deltas <= 0)), len(deltas), confidence,
    )  # fmt: skip


def paired_bootstrap(
    a: ImageStats,
    b: ImageStats,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    metrics: Sequence[str] = ("Bleu_4", "CIDEr"),
) -> dict[str, Difference]:
    """Bootstrap intervals of ``b - a`` for ``metrics`` (of ``BOOTSTRAP_METRICS``), resampling the images
    (paired)."""
    _checked("paired_bootstrap", metrics, resamples, confidence)
    b = _aligned(a, b)
    n = len(a.ids)
    index = np.random.default_rng(seed).integers(0, n, size=(resamples, n))  # (R, N) image draws
    # per system, once for both BLEU variants: its statistics summed over each resample's images, (R, 1[, 4])
    bleu_sums = (
        [[x[index].sum(1, keepdims=True) for x in s._bleu_arrays()] for s in (a, b)]
        if any(m.startswith("Bleu") for m in metrics)
        else []
    )
    out = {}
    for metric in metrics:
        if metric in ("Bleu_4", "Bleu_4_nobp"):
            sa, sb = (_bleu4(*sums, brevity=metric == "Bleu_4") for sums in bleu_sums)  # (R,)
        else:
            sa, sb = a.cider[index].mean(-1), b.cider[index].mean(-1)  # (R,)
        out[metric] = _difference(metric, (_corpus(metric, a), _corpus(metric, b)), sb - sa, confidence)
    return out


def seed_image_bootstrap(
    a: Sequence[ImageStats],
    b: Sequence[ImageStats],
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    metrics: Sequence[str] = ("Bleu_4", "CIDEr"),
) -> dict[str, Difference]:
    """Bootstrap intervals of ``b - a`` for systems trained with several seeds (``a``, ``b``: one
    ``ImageStats`` per seed), resampling at both levels the difference varies at: each resample draws the
    images (with replacement, the same for both systems: paired), then for each system as many seeds as it
    has (with replacement), and compares the drawn seeds pooled per image (``pooled``).

    ``paired_bootstrap(pooled(a), pooled(b))`` resamples images only: it answers "would these trained models
    still differ on other images", not "would the recipes differ when trained again". This interval also
    holds the seed-to-seed spread. Images and seeds are crossed (every seed captions every image), and
    resampling both independently is the "pigeonhole" bootstrap of Owen (2007), which no bootstrap of a
    crossed design makes exact (McCullagh 2000): it counts the image × seed interaction in twice, while with
    n seeds the bootstrap's seed variance is only (n−1)/n of the sample's and a system has few distinct seed
    draws (3 for two seeds, 10 for three). Read it as an approximate companion of the image interval,
    beside the seeds' own t interval (``welch_interval``), not as exact. With one seed per system it is
    ``paired_bootstrap`` on the same draws.

    Draw order (images, then a's seeds, then b's) is part of the contract: one seed each reproduces
    ``paired_bootstrap(a[0], b[0], seed=seed)`` exactly."""
    _checked("seed_image_bootstrap", metrics, resamples, confidence)
    if not a or not b:
        raise ValueError("seed_image_bootstrap: each system needs at least one run")
    first = a[0]
    a = [first, *(_aligned(first, s) for s in a[1:])]
    b = [_aligned(first, s) for s in b]
    rng = np.random.default_rng(seed)
    images = rng.integers(0, len(first.ids), size=(resamples, len(first.ids)))  # (R, N) image draws
    # per system (R, S): how often each seed is drawn in each resample, the weight of its statistics in the pool
    weights = [
        (rng.integers(0, len(runs), (resamples, len(runs)))[:, :, None] == np.arange(len(runs))).sum(1)
        for runs in (a, b)
    ]
    # per system, once for both BLEU variants: the drawn seeds' statistics summed over the drawn images
    bleu_sums = (
        [_drawn_bleu_sums(runs, images, w) for runs, w in zip((a, b), weights)]
        if any(m.startswith("Bleu") for m in metrics)
        else []
    )
    full = pooled(a), pooled(b)
    out = {}
    for metric in metrics:
        if metric.startswith("Bleu"):
            sa, sb = (_bleu4(*sums, brevity=metric == "Bleu_4") for sums in bleu_sums)  # (R,)
        else:
            # (R, S) each seed's mean CIDEr-D on the drawn images -> (R,) the mean over the drawn seeds
            sa, sb = (
                (w * np.stack([run.cider[images].mean(-1) for run in runs], axis=1)).sum(1) / w.sum(1)
                for runs, w in zip((a, b), weights)
            )
        out[metric] = _difference(
            metric, (_corpus(metric, full[0]), _corpus(metric, full[1])), sb - sa, confidence
        )
    return out


def _drawn_bleu_sums(runs: Sequence[ImageStats], images: np.ndarray, weights: np.ndarray) -> list[np.ndarray]:
    """The BLEU statistics of each resample's drawn seeds on its drawn images (``images`` (R, N), ``weights``
    (R, S)), summed with each seed counted as often as it was drawn: hypothesis and reference lengths (R, 1),
    n-gram matches and counts (R, 1, 4); the kept image axis is the one ``_bleu4`` sums over."""
    out = []
    for j in range(4):  # hyp_len, ref_len, matches, counts
        per_seed = np.stack([run._bleu_arrays()[j][images].sum(1) for run in runs])  # (S, R) or (S, R, 4)
        out.append(np.einsum("rs,sr...->r...", weights, per_seed)[:, None])
    return out


def pooled(stats: Sequence[ImageStats]) -> ImageStats:
    """Several runs (seeds) of one system as one: per image, BLEU statistics summed and CIDEr-D averaged,
    so a bootstrap over images compares systems averaged over their seeds."""
    if not stats:
        raise ValueError("pooled: no runs")
    first = stats[0]
    aligned = [first, *(_aligned(first, s) for s in stats[1:])]
    return ImageStats(
        first.ids,
        sum(s.hyp_len for s in aligned),
        sum(s.ref_len for s in aligned),
        sum(s.matches for s in aligned),
        sum(s.counts for s in aligned),
        np.mean([s.cider for s in aligned], axis=0),
    )


def welch_interval(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float] | None:
    """``mean(b) − mean(a)`` over seeds and its 95% Welch t interval (unequal variances, Welch–Satterthwaite
    degrees of freedom rounded down: the wider quantile), or None with fewer than 2 values on either side.
    It sees each seed's score only, not the images: with 2–3 seeds its few degrees of freedom make it wide,
    which is the point of it next to the bootstrap intervals."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if len(x) < 2 or len(y) < 2:
        return None
    va, vb = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    delta = float(y.mean() - x.mean())
    if va + vb == 0:
        return delta, delta, delta
    df = (va + vb) ** 2 / (va**2 / (len(x) - 1) + vb**2 / (len(y) - 1))
    half = _T975[max(k for k in _T975 if k <= max(1, math.floor(df)))] * math.sqrt(va + vb)
    return delta, delta - half, delta + half


# Student's t 97.5% quantiles by degrees of freedom (two-sided 95%), so seeds' intervals need no scipy.
_T975 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    15: 2.131,
    20: 2.086,
    30: 2.042,
}  # between rows: the lower row's (wider) value


def mean_ci(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean, sample std and the half-width of the 95% Student-t interval of the mean over seeds
    (std and half-width NaN for fewer than 2 values)."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) < 2:
        return (float(x.mean()) if len(x) else math.nan), math.nan, math.nan
    std = float(x.std(ddof=1))
    return float(x.mean()), std, _T975[max(k for k in _T975 if k <= len(x) - 1)] * std / math.sqrt(len(x))
