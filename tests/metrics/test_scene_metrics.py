"""The seams of scene scoring: one scene-object type, one scoring path, one metric registry.

Validation (the LightningModule) and ``captioning evaluate`` score the same captions to the same numbers;
a metric defined here and registered (one registry line, monkeypatched) is logged as ``val/<name>``, stored
in scores.json and printed by evaluate without touching any other file (docs/design/extending.md, "Adding a
metric", is this example); the object types and their dict form round-trip.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np
import pytest

from captioning.data.sources import SyntheticSource
from captioning.inference.evaluation import (
    SplitCaptions,
    evaluate_checkpoint,
    format_evaluation,
    scene_results,
)
from captioning.metrics.names import SCENE_METRICS
from captioning.metrics.scenes import SceneBatch, SceneMetric, scene_metrics, scene_scores, scene_values
from captioning.scenes import COLORS, SHAPES, SIZES, SceneObject, scene_object

from support.corpus import build_module, write_checkpoint

SCENE_WORDS = ["a", "and", "in", "the", *SIZES, *COLORS, *SHAPES, "top", "bottom", "left", "right", "center"]


# -- the worked example of docs/design/extending.md ("Adding a metric") ---------------------------------
def colour_recall(batch: SceneBatch, before: Mapping[str, float]) -> dict[str, float | int]:
    """Of the scene objects, the fraction whose colour word the caption uses (bound to it or not)."""
    named = total = 0
    for words, scene in zip(batch.tokens, batch.scenes):
        for obj in scene:
            named += obj.color in words
            total += 1
    return {"colors": named / total if total else math.nan, "objects": total}


COLORS_NAMED = SceneMetric(
    name="colors",
    compute=colour_recall,
    value=lambda result: result["colors"],
    format=lambda result: f"colours named: {result['colors']:.4f} of {result['objects']} objects",
)


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(SCENE_METRICS, "colors", COLORS_NAMED)  # the one registry line
    return COLORS_NAMED


# -- helpers -------------------------------------------------------------------------------------------
def _captions(source: SyntheticSource, rng: np.random.Generator) -> list[list[str]]:
    """A mix of right captions, wrong bindings and words that name nothing."""
    out = []
    for i in range(len(source)):
        words = source.captions(i)[0].split()
        kind = i % 3
        if kind == 1:  # a wrong colour on every object
            words = [COLORS[(COLORS.index(w) + 1) % len(COLORS)] if w in COLORS else w for w in words]
        elif kind == 2:
            words = list(rng.choice(SCENE_WORDS, size=6))
        out.append(words)
    return out


def _validation_logs(module, source, tokens, attention) -> dict[str, float]:
    """What the LightningModule logs at the end of a validation that decoded ``tokens`` / ``attention``."""
    logged = {}
    module.log = lambda name, value, **_: logged.__setitem__(name, value)
    module._gather = lambda items: items  # one process, no Trainer attached
    module._generated = [
        (i, " ".join(words), list(source.captions(i)), (words, maps, scene["image_size"], scene["objects"]))
        for i, (words, maps) in enumerate(zip(tokens, attention))
        for scene in [source.scene(i)]  # plain data, as a batch carries it
    ]
    module._score_generated("val")
    return logged


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


# -- one path ------------------------------------------------------------------------------------------
def test_validation_and_evaluate_give_identical_numbers_on_the_same_captions(registered):
    source = SyntheticSource(12, seed=3, split="val")
    module = build_module(SCENE_WORDS, ["model.val_metrics=[objects,grounding,scene_score,colors]"])
    grid = (module.net.grid_size, module.net.grid_size)
    rng = np.random.default_rng(0)
    tokens = _captions(source, rng)
    attention = [rng.random((len(words) + 1, grid[0] * grid[1])) for words in tokens]  # + the <end> step
    for i, maps in enumerate(attention[::2]):  # every other caption looks at its first object throughout
        x0, y0, x1, y1 = source.objects(2 * i)[0].box
        maps[:, int((y0 + y1) / 2 / 96 * grid[0]) * grid[1] + int((x0 + x1) / 2 / 96 * grid[1])] = 2.0

    logged = _validation_logs(module, source, tokens, attention)
    decoded = SplitCaptions(
        list(range(len(source))), [" ".join(t) for t in tokens], tokens, attention, grid,
        indices=list(range(len(source))),
    )  # fmt: skip
    evaluated = scene_values(scene_results(decoded, source))

    assert set(logged) == {"val/objects", "val/grounding", "val/scene_score", "val/colors"}
    assert set(evaluated) == {"objects", "grounding", "scene_score", "colors"}
    for name, value in evaluated.items():
        assert _same(logged[f"val/{name}"], float(value)), name
    assert 0 < evaluated["objects"] < 1 and 0 < evaluated["grounding"] < 1  # not a trivial 0 / 1 / NaN
    # the words-only entry point is the same path
    sizes = [source.scene(i)["image_size"] for i in range(len(source))]
    objects = [source.objects(i) for i in range(len(source))]
    assert scene_scores(tokens, attention, grid, sizes, objects) == pytest.approx(evaluated, nan_ok=True)


def test_a_registered_metric_is_logged_stored_and_printed(registered, tmp_path):
    assert [m.name for m in scene_metrics()] == ["objects", "grounding", "scene_score", "colors"]
    checkpoint = write_checkpoint(tmp_path / "untrained.ckpt", SCENE_WORDS)
    source = SyntheticSource(6, seed=0, split="test")
    evaluation = evaluate_checkpoint(checkpoint, source, tokenizer="simple", metrics=("Bleu_1",))
    scores = evaluation.to_dict()
    assert scores["colors"] == evaluation.scenes["colors"] and scores["colors"]["objects"] > 0
    assert scores["objects"] == evaluation.objects and scores["grounding"] == evaluation.grounding
    printed = format_evaluation(evaluation)
    assert f"colours named: {scores['colors']['colors']:.4f}" in printed
    assert "objects named right:" in printed and "attention grounding:" in printed

    # validation on the same captions logs it as val/colors, with the number evaluate stored
    module = build_module(SCENE_WORDS, ["model.val_metrics=[scene_score,colors]"])
    d = evaluation.decoded
    logged = _validation_logs(module, source, d.tokens, d.attention)
    assert set(logged) == {"val/scene_score", "val/colors"}  # val_metrics picks what is logged
    assert _same(logged["val/colors"], scores["colors"]["colors"])
    assert _same(logged["val/scene_score"], scores["scene_score"])


def test_an_unregistered_name_is_refused():
    with pytest.raises(Exception, match=r"val_metrics \['colors'\]: expected names from"):
        build_module(SCENE_WORDS, ["model.val_metrics=[objects,colors]"])
    assert list(SCENE_METRICS) == ["objects", "grounding", "scene_score"]


# -- one object type -----------------------------------------------------------------------------------
def test_the_object_types_and_their_dict_form_round_trip():
    from captioning.data import synthetic
    from captioning.metrics import grounding, objects

    assert synthetic.SceneObject is grounding.SceneObject is SceneObject  # one type
    assert (
        objects.COLORS == COLORS == tuple(synthetic.COLORS) and tuple(synthetic.SIZES) == SIZES
    )  # one vocabulary
    source = SyntheticSource(20, seed=1, split="train")
    for i in range(len(source)):
        for obj, plain in zip(source.objects(i), source.scene(i)["objects"]):
            assert plain == obj.to_dict() == dataclasses.asdict(obj)
            assert scene_object(plain) == obj and scene_object(obj) is obj
            assert SceneObject(**plain) == obj and hash(SceneObject(**plain)) == hash(obj)
    # grounding's old constructor (no position) and a box given as a list of ints
    old = SceneObject(shape="circle", color="red", size="big", box=[0, 0, 32, 32])
    assert old.box == (0.0, 0.0, 32.0, 32.0) and old.position is None
    with pytest.raises(ValueError, match=r"lacks keys \['position'\]"):
        objects.score_caption("a big red circle", [old])
    with pytest.raises(ValueError, match=r"box \[0, 1\] must be \(x0, y0, x1, y1\)"):
        scene_object({"shape": "circle", "color": "red", "size": "big", "box": [0, 1]})


def test_dicts_and_objects_score_alike():
    from captioning.metrics.objects import object_accuracy

    source = SyntheticSource(10, seed=2, split="test")
    captions = [source.captions(i)[i % 5] for i in range(len(source))]
    as_objects = [list(source.objects(i)) for i in range(len(source))]
    as_dicts = [source.scene(i)["objects"] for i in range(len(source))]
    a, b = object_accuracy(captions, as_objects), object_accuracy(captions, as_dicts)
    assert repr(a) == repr(b) and a["object_accuracy"] == 1.0  # repr: NaN fields compare equal
