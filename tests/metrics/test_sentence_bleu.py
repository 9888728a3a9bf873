"""captioning/metrics/bleu.py: per-caption BLEU-n equals the coco-caption toolkit's per-caption list."""

from __future__ import annotations

import json
import math
import random

import pytest
from pycocoevalcap.bleu.bleu import Bleu

from captioning.metrics.bleu import SentenceBleu

from support import SHARED_DATA
from support.helpers import random_caption

DEMO = SHARED_DATA / "coco_caption_eval"


@pytest.mark.parametrize("n", [1, 2, 4])
def test_equals_pycocoevalcap_per_caption_on_random_captions(n: int) -> None:
    rng = random.Random(n)
    refs = {i: [random_caption(rng) for _ in range(rng.randint(1, 5))] for i in range(80)}
    hyps = {i: [random_caption(rng)] for i in range(80)}
    _, theirs = Bleu(n).compute_score(refs, hyps, verbose=0)  # theirs[k]: per-caption BLEU-(k+1)
    ours = SentenceBleu([refs[i] for i in range(80)], n=n).scores([hyps[i][0] for i in range(80)], range(80))
    assert ours == pytest.approx(theirs[n - 1], abs=1e-12)


def test_a_reference_scores_one_and_clipping_and_brevity_apply() -> None:
    refs = [["a dog runs on the grass", "the dog is running"]]
    assert SentenceBleu(refs).score("a dog runs on the grass", 0) == pytest.approx(1.0)
    # one "the" of four matches (clipped to the most one reference has), no 2-gram does
    assert SentenceBleu(refs, n=2).score("the the the the", 0) == pytest.approx((0.25 * 1e-15 / 3) ** 0.5)
    # every 1- and 2-gram matches, but 2 words against the closest reference's 4: exp(1 - 4 / 2)
    assert SentenceBleu(refs, n=2).score("the dog", 0) == pytest.approx(math.exp(-1.0))


@pytest.mark.skipif(not DEMO.is_dir(), reason="needs ../shared/data/coco_caption_eval")
def test_equals_pycocoevalcap_per_caption_on_the_official_demo() -> None:
    refs = json.loads((DEMO / "references_ptbtokenized.json").read_text())
    hyps = json.loads((DEMO / "results_ptbtokenized.json").read_text())
    ids = list(refs)
    _, theirs = Bleu(4).compute_score({i: refs[i] for i in ids}, {i: hyps[i] for i in ids}, verbose=0)
    ours = SentenceBleu([refs[i] for i in ids]).scores([hyps[i][0] for i in ids], range(len(ids)))
    assert ours == pytest.approx(theirs[3], abs=1e-12)
