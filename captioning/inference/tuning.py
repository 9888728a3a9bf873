"""Decoding tuned on a dev split: a grid over beam width, length penalty and repeated n-gram blocking,
each setting scored by CIDEr-D of its captions, the best one chosen.

Choosing on the split one then reports flatters the choice, so every row also carries CIDEr-D on the
two halves of the split (even / odd source indices, each scored on its own, as if it were the test
set): ``held_out`` chooses on one half and reports the other, in both directions, so the README can say
what the tuning gains on images it did not see. Selection uses the toolkit-free CIDEr-D of
``captioning.metrics.cider`` (equal to pycocoevalcap's on the same tokens) with the project's tokenizer,
so a grid of a dozen settings costs a dozen decodes and no Java.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import Any

from captioning.data.sources import CaptionSource
from captioning.data.tokenize import tokenize
from captioning.metrics.cider import CiderD


@dataclass(frozen=True)
class TuningRow:
    options: dict[str, Any]  # the decoding options of this setting (HF generate names)
    cider: float  # CIDEr-D on the whole split, the toolkit's scale (0.5 = the README's 50.0)
    cider_even: float  # on the images of even source index, scored on their own
    cider_odd: float
    mean_length: float  # words per caption

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def grid(**values: list[Any]) -> list[dict[str, Any]]:
    """Every combination: ``grid(num_beams=[3, 5], length_penalty=[0, 1])`` -> 4 option dicts."""
    names = list(values)
    return [dict(zip(names, combo)) for combo in itertools.product(*(values[n] for n in names))]


class SplitScorer:
    """CIDEr-D of captions for the images of a source: whole, even half, odd half (df of each own refs)."""

    def __init__(self, source: CaptionSource):
        refs = [[" ".join(tokenize(c)) for c in source.captions(i)] for i in range(len(source))]
        self.halves = {
            "all": list(range(len(refs))),
            "even": list(range(0, len(refs), 2)),
            "odd": list(range(1, len(refs), 2)),
        }
        self.scorers = {name: CiderD([refs[i] for i in idx]) for name, idx in self.halves.items()}

    def __call__(self, captions_by_index: dict[int, str]) -> dict[str, float]:
        out = {}
        for name, idx in self.halves.items():
            hyps = [" ".join(tokenize(captions_by_index.get(i, ""))) for i in idx]
            out[name] = self.scorers[name].corpus_score(hyps)
        return out


def score_setting(
    options: dict[str, Any], captions_by_index: dict[int, str], scorer: SplitScorer
) -> TuningRow:
    scores = scorer(captions_by_index)
    lengths = [len(tokenize(c)) for c in captions_by_index.values()]
    return TuningRow(
        dict(options), scores["all"], scores["even"], scores["odd"], sum(lengths) / max(len(lengths), 1)
    )


def best(rows: list[TuningRow], key: str = "cider") -> TuningRow:
    """The row with the highest ``key``; ties go to the earlier (simpler) setting of the grid."""
    return max(rows, key=lambda r: (getattr(r, key), -rows.index(r)))


def held_out(rows: list[TuningRow], baseline: dict[str, Any]) -> dict[str, Any]:
    """Choose on one half, report the other, both ways: the tuned gain over ``baseline`` on unseen images."""
    base = next((r for r in rows if r.options == baseline), None)
    if base is None:
        raise ValueError(f"the baseline setting {baseline} is not in the grid")
    out = {}
    for chosen_on, reported_on in (("even", "odd"), ("odd", "even")):
        pick = best(rows, f"cider_{chosen_on}")
        out[f"chosen_on_{chosen_on}"] = {
            "options": pick.options,
            f"cider_{reported_on}": getattr(pick, f"cider_{reported_on}"),
            f"baseline_cider_{reported_on}": getattr(base, f"cider_{reported_on}"),
        }
    return out
