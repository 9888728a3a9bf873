"""Paired bootstrap of corpus BLEU-4 / CIDEr-D differences (captioning.metrics.bootstrap), checked against
pycocoevalcap's own corpus scores."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider

from captioning.metrics.bootstrap import (
    BOOTSTRAP_METRICS,
    image_stats,
    mean_ci,
    paired_bootstrap,
    pooled,
    seed_image_bootstrap,
    welch_interval,
)

WORDS = [
    "a",
    "dog",
    "cat",
    "man",
    "woman",
    "runs",
    "sits",
    "on",
    "the",
    "grass",
    "beach",
    "red",
    "blue",
    "ball",
    "plays",
    "with",
    "in",
    "water",
]


def corpus(seed: int, n: int = 60) -> tuple[dict, dict, dict]:
    """References (5 per image) and two systems: ``good`` copies a reference with noise, ``bad`` is
    shorter and noisier."""
    rng = np.random.default_rng(seed)
    refs, good, bad = {}, {}, {}
    for i in range(n):
        refs[i] = [" ".join(rng.choice(WORDS, size=rng.integers(5, 11))) for _ in range(5)]
        words = refs[i][0].split()
        good[i] = " ".join(w if rng.random() < 0.8 else str(rng.choice(WORDS)) for w in words)
        bad[i] = " ".join(w if rng.random() < 0.4 else str(rng.choice(WORDS)) for w in words[:4])
    return refs, good, bad


def test_full_set_scores_equal_the_toolkit():
    refs, good, _ = corpus(0)
    stats = image_stats(refs, good)
    bleu, _ = Bleu(4).compute_score(refs, {i: [c] for i, c in good.items()})
    cider, per_image = Cider().compute_score(refs, {i: [c] for i, c in good.items()})
    assert stats.bleu4() == pytest.approx(bleu[3], rel=1e-12)
    assert stats.cider.mean() == pytest.approx(cider, rel=1e-12)
    np.testing.assert_allclose(stats.cider, per_image)


def test_bleu_without_brevity_penalty_is_the_toolkits_bleu_divided_by_its_penalty():
    from pycocoevalcap.bleu.bleu_scorer import BleuScorer

    refs, good, bad = corpus(2)
    for system, short in ((bad, True), (good, False)):
        scorer = BleuScorer(n=4)
        for i, caption in system.items():
            scorer += (caption, refs[i])
        bleu, _ = scorer.compute_score(option="closest")
        ratio = scorer._testlen / scorer._reflen  # the toolkit's own lengths
        penalty = math.exp(1 - 1 / ratio) if ratio < 1 else 1.0
        stats = image_stats(refs, system)
        assert stats.length_ratio() == pytest.approx(ratio, rel=1e-12)
        assert (ratio < 1) == short  # "bad" keeps 4 words of a reference: far shorter
        assert stats.bleu4(brevity=False) == pytest.approx(bleu[3] / penalty, rel=1e-9)
    d = paired_bootstrap(image_stats(refs, good), image_stats(refs, bad), resamples=200,
                         metrics=("Bleu_4", "Bleu_4_nobp"))  # fmt: skip
    assert d["Bleu_4_nobp"].delta > d["Bleu_4"].delta  # dropping BP forgives the short system
    with pytest.raises(ValueError, match="unknown metric 'METEOR'"):
        paired_bootstrap(image_stats(refs, good), image_stats(refs, bad), metrics=("METEOR",))


def test_resample_bleu_is_the_toolkit_on_the_resampled_corpus():
    """A resample with repeats is scored exactly as the toolkit scores the repeated corpus."""
    refs, good, _ = corpus(1, n=20)
    stats = image_stats(refs, good)
    index = np.random.default_rng(3).integers(0, 20, size=20)
    r_refs = {k: refs[stats.ids[j]] for k, j in enumerate(index)}
    r_hyp = {k: [good[stats.ids[j]]] for k, j in enumerate(index)}
    bleu, _ = Bleu(4).compute_score(r_refs, r_hyp)
    assert stats.bleu4(index) == pytest.approx(bleu[3], rel=1e-12)


def test_identical_systems_differ_by_exactly_zero():
    refs, good, _ = corpus(2)
    a = image_stats(refs, good)
    diff = paired_bootstrap(a, a, resamples=200)
    for d in diff.values():
        assert d.delta == 0 and d.low == 0 and d.high == 0 and not d.significant
        assert d.p_b_not_better == 1.0


def test_a_clearly_better_system_has_an_interval_above_zero_and_order_matters():
    refs, good, bad = corpus(3)
    worse, better = image_stats(refs, bad), image_stats(refs, good)
    up = paired_bootstrap(worse, better, resamples=500, seed=1)
    down = paired_bootstrap(better, worse, resamples=500, seed=1)
    for metric in ("Bleu_4", "CIDEr"):
        assert up[metric].low > 0 and up[metric].significant and up[metric].p_b_not_better == 0
        assert down[metric].high < 0
        assert down[metric].delta == pytest.approx(-up[metric].delta)
        assert up[metric].low <= up[metric].delta <= up[metric].high


def test_pairs_by_image_id_not_by_position():
    refs, good, bad = corpus(4, n=30)
    a = image_stats(refs, good)
    b = image_stats(dict(reversed(list(refs.items()))), good)  # same system, other order
    diff = paired_bootstrap(a, b, resamples=100)
    assert diff["CIDEr"].delta == pytest.approx(0, abs=1e-12) and diff["CIDEr"].high == pytest.approx(0)
    with pytest.raises(ValueError, match="ids differ"):
        paired_bootstrap(a, image_stats({k: refs[k] for k in list(refs)[:10]}, good), resamples=100)


def test_pooled_seeds_and_bad_arguments():
    refs, good, bad = corpus(5, n=25)
    a, b = image_stats(refs, good), image_stats(refs, bad)
    both = pooled([a, b])
    np.testing.assert_allclose(both.cider, (a.cider + b.cider) / 2)
    assert both.matches.sum() == a.matches.sum() + b.matches.sum()
    with pytest.raises(ValueError, match="resamples=10"):
        paired_bootstrap(a, b, resamples=10)
    with pytest.raises(ValueError, match="no hypothesis"):
        image_stats(refs, {k: v for k, v in good.items() if k != 0})


def test_mean_ci_over_seeds():
    mean, std, half = mean_ci([0.50, 0.52, 0.54])
    assert mean == pytest.approx(0.52) and std == pytest.approx(0.02)
    assert half == pytest.approx(4.303 * 0.02 / 3**0.5)
    assert np.isnan(mean_ci([0.5])[2])


ALL = BOOTSTRAP_METRICS


def test_one_seed_each_is_the_image_bootstrap_on_the_same_draws():
    refs, good, bad = corpus(6, n=40)
    a, b = image_stats(refs, good), image_stats(refs, bad)
    two_level = seed_image_bootstrap([a], [b], resamples=300, seed=4, metrics=ALL)
    images_only = paired_bootstrap(a, b, resamples=300, seed=4, metrics=ALL)
    for m in ALL:
        assert two_level[m] == images_only[m]


def test_seeds_that_agree_add_nothing_to_the_interval():
    """The same run twice per system: every seed draw pools to the same corpus, so only images vary."""
    refs, good, bad = corpus(7, n=40)
    a, b = image_stats(refs, good), image_stats(refs, bad)
    two_level = seed_image_bootstrap([a, a], [b, b, b], resamples=300, seed=2, metrics=ALL)
    images_only = paired_bootstrap(a, b, resamples=300, seed=2, metrics=ALL)
    for m in ALL:
        assert two_level[m].delta == pytest.approx(images_only[m].delta, abs=1e-12)
        # rel 1e-4, not exact: the toolkit's guards (1e-15 / 1e-9 added to n-gram sums) see doubled sums
        bounds = (images_only[m].low, images_only[m].high)
        assert (two_level[m].low, two_level[m].high) == pytest.approx(bounds, rel=1e-4)


def test_equals_pooling_the_drawn_seeds_one_resample_at_a_time():
    """The vectorised weights against the definition: per resample, pool the drawn seeds' images."""
    refs, good, bad = corpus(8, n=30)
    _, mid, _ = corpus(9, n=30)
    mid = {i: mid[i] if i % 2 else good[i] for i in refs}  # a third system, between the two
    a_runs = [image_stats(refs, good), image_stats(refs, bad)]
    b_runs = [image_stats(refs, mid), image_stats(refs, good), image_stats(refs, bad)]
    resamples = 150
    got = seed_image_bootstrap(a_runs, b_runs, resamples=resamples, seed=3, metrics=ALL)
    rng = np.random.default_rng(3)  # the documented draw order: images, a's seeds, b's seeds
    images = rng.integers(0, 30, size=(resamples, 30))
    draws_a = rng.integers(0, 2, size=(resamples, 2))
    draws_b = rng.integers(0, 3, size=(resamples, 3))
    for m in ALL:
        deltas = []
        for r in range(resamples):
            pa = pooled([a_runs[k].take(images[r]) for k in draws_a[r]])
            pb = pooled([b_runs[k].take(images[r]) for k in draws_b[r]])
            if m == "CIDEr":
                deltas.append(pb.cider.mean() - pa.cider.mean())
            else:
                deltas.append(pb.bleu4(brevity=m == "Bleu_4") - pa.bleu4(brevity=m == "Bleu_4"))
        low, high = np.percentile(deltas, [2.5, 97.5])
        assert (got[m].low, got[m].high) == pytest.approx((low, high), rel=1e-9, abs=1e-12)
        deltas = np.array(deltas)  # ties (both draw the same runs) are 0 up to rounding on either side
        assert np.mean(deltas < -1e-9) <= got[m].p_b_not_better <= np.mean(deltas <= 1e-9)
        full = paired_bootstrap(pooled(a_runs), pooled(b_runs), resamples=100, metrics=(m,))[m]
        assert got[m].delta == pytest.approx(full.delta, abs=1e-12)


def test_seeds_that_disagree_widen_the_interval():
    """System b's seeds are one good and one bad model: images alone call its pooled difference from a
    precise, the seed level says a retrained b could land anywhere between."""
    refs, good, bad = corpus(10, n=60)
    a = image_stats(refs, {i: good[i] if i % 2 else bad[i] for i in refs})
    b_runs = [image_stats(refs, good), image_stats(refs, bad)]
    two_level = seed_image_bootstrap([a], b_runs, resamples=1000, seed=0)
    images_only = paired_bootstrap(a, pooled(b_runs), resamples=1000, seed=0)
    for m in ("Bleu_4", "CIDEr"):
        assert two_level[m].high - two_level[m].low > 2 * (images_only[m].high - images_only[m].low)


def test_seed_image_bootstrap_refuses_bad_arguments():
    refs, good, _ = corpus(11, n=20)
    a = image_stats(refs, good)
    with pytest.raises(ValueError, match="at least one run"):
        seed_image_bootstrap([a], [])
    with pytest.raises(ValueError, match="seed_image_bootstrap: unknown metric 'METEOR'"):
        seed_image_bootstrap([a], [a], metrics=("METEOR",))
    with pytest.raises(ValueError, match="ids differ"):
        seed_image_bootstrap([a], [image_stats({k: refs[k] for k in list(refs)[:5]}, good)])


def test_seed_image_bootstrap_pairs_every_run_by_image_id():
    """Runs listed in other image orders (as results files may be) give the same intervals."""
    refs, good, bad = corpus(12, n=30)
    _, mid, _ = corpus(13, n=30)
    mid = {i: mid[i] if i % 3 else good[i] for i in refs}
    reordered = dict(reversed(list(refs.items())))
    a = [image_stats(refs, good), image_stats(refs, mid)]
    b = [image_stats(refs, bad), image_stats(refs, mid)]
    mixed_a = [a[0], image_stats(reordered, mid)]
    mixed_b = [image_stats(reordered, bad), image_stats(reordered, mid)]
    same = seed_image_bootstrap(a, b, resamples=200, seed=5, metrics=ALL)
    mixed = seed_image_bootstrap(mixed_a, mixed_b, resamples=200, seed=5, metrics=ALL)
    for m in ALL:
        assert (mixed[m].delta, mixed[m].low, mixed[m].high) == pytest.approx(
            (same[m].delta, same[m].low, same[m].high), rel=1e-12, abs=1e-15
        )


def test_welch_interval_of_seed_means():
    # equal sizes and variances: df = 4, t = 2.776, se = sqrt(1/3 + 1/3)
    delta, low, high = welch_interval([1, 2, 3], [2, 3, 4])
    assert delta == 1 and (low, high) == pytest.approx(
        (1 - 2.776 * (2 / 3) ** 0.5, 1 + 2.776 * (2 / 3) ** 0.5)
    )
    # unequal variances: Welch-Satterthwaite df = 1.03 -> 1 (the wider quantile, 12.706)
    delta, low, high = welch_interval([0.50, 0.51, 0.52], [0.40, 0.50])
    se = (0.0001 / 3 + 0.005 / 2) ** 0.5
    assert delta == pytest.approx(-0.06) and high - delta == pytest.approx(12.706 * se)
    assert welch_interval([0.5], [0.4, 0.5]) is None and welch_interval([0.5, 0.6], []) is None
    assert welch_interval([0.5, 0.5], [0.6, 0.6]) == pytest.approx((0.1, 0.1, 0.1))
