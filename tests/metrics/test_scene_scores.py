"""Validation on synthetic scenes scores objects named right, grounding and their product, and keeps the
checkpoint with the best product (captioning.metrics.scenes, captioning/conf/scoring/synthetic.yaml)."""

import csv
import math

import numpy as np
import pytest
import torch

from captioning.data.sources import CaptionSource, SyntheticSource
from captioning.errors import ConfigError
from captioning.inference.evaluation import evaluate_checkpoint
from captioning.metrics.scenes import scene_scores
from captioning.training.train import train
from captioning.training.validate import check_config

from support import TINY, compose_train

GRID = (96, 96)  # one cell per pixel of the 96-px canvas: a peak cell's centre is that pixel + 0.5


def _scene(seed: int):
    source = SyntheticSource(1, seed=seed, split="test")
    return source.scene(0)


def _two_object_scene():
    for seed in range(100):
        scene = _scene(seed)
        objs = scene["objects"]
        if len(objs) == 2 and len({(o["size"], o["color"], o["shape"]) for o in objs}) == 2:
            return scene
    raise AssertionError("no two-object scene in 100 seeds")


def _caption(objects) -> list[str]:
    words = []
    for k, o in enumerate(objects):
        words += (["and"] if k else []) + [
            "a",
            o["size"],
            o["color"],
            o["shape"],
            "in",
            "the",
            *o["position"].split(),
        ]
    return words


def _attention(words, objects, look_at) -> np.ndarray:
    """(T, 96*96) maps peaking, for each object phrase, at ``look_at(object)``'s pixel."""
    maps = np.full((len(words), GRID[0] * GRID[1]), 1e-5)
    phrase = 0
    for t, w in enumerate(words):
        phrase += w == "and"
        x, y = look_at(objects[phrase])
        maps[t, y * GRID[1] + x] = 1.0  # row-major over the grid
    return maps


def _centre(o):
    x0, y0, x1, y1 = o["box"]
    return int((x0 + x1) / 2), int((y0 + y1) / 2)


def _far(o):
    cx, cy = _centre(o)
    return (95 if cx < 48 else 0), (95 if cy < 48 else 0)  # the opposite corner: outside the box


def test_right_captions_looking_at_their_objects_score_one_and_looking_away_zero():
    scene = _two_object_scene()
    objs, size = scene["objects"], scene["image_size"]
    words = _caption(objs)
    on = scene_scores([words], [_attention(words, objs, _centre)], GRID, [size], [objs])
    assert on == {"objects": 1.0, "grounding": 1.0, "scene_score": 1.0}
    away = scene_scores([words], [_attention(words, objs, _far)], GRID, [size], [objs])
    assert away == {"objects": 1.0, "grounding": 0.0, "scene_score": 0.0}


def test_a_wrong_object_halves_objects_and_the_product_follows():
    scene = _two_object_scene()
    objs, size = scene["objects"], scene["image_size"]
    words = _caption(objs)
    shapes = ["circle", "square", "triangle"]
    first_shape = words.index(objs[0]["shape"])
    words[first_shape] = next(s for s in shapes if s not in {o["shape"] for o in objs})  # no such object
    scores = scene_scores([words], [_attention(words, objs, _centre)], GRID, [size], [objs])
    assert scores["objects"] == 0.5
    assert scores["grounding"] == 1.0  # the second phrase's 3 words; the first matches no object
    assert scores["scene_score"] == 0.5


def test_captions_without_object_words_have_no_grounding_and_score_zero():
    scene = _two_object_scene()
    words = ["a", "picture"]
    scores = scene_scores(
        [words], [np.full((2, 96 * 96), 1.0)], GRID, [scene["image_size"]], [scene["objects"]]
    )
    assert scores["objects"] == 0.0 and math.isnan(scores["grounding"]) and scores["scene_score"] == 0.0


def test_mismatched_lengths_are_refused():
    scene = _two_object_scene()
    with pytest.raises(ValueError, match="2 captions, 1 attention maps"):
        scene_scores([["a"], ["b"]], [np.ones((1, 4))], (2, 2), [scene["image_size"]], [scene["objects"]])


def test_photos_have_no_scene_and_scenes_are_plain_data():
    assert CaptionSource().scene(0) is None  # what every photo source inherits
    scene = _scene(0)
    assert scene["image_size"] == (96, 96)
    assert set(scene["objects"][0]) == {"shape", "color", "size", "position", "box"}


def test_synthetic_runs_monitor_scene_score_and_photo_runs_cider():
    synthetic = compose_train([])
    assert list(synthetic.model.val_metrics) == ["Bleu_4", "CIDEr", "objects", "grounding", "scene_score"]
    assert synthetic.callbacks.model_checkpoint.monitor == "val/scene_score"
    for photos in (["experiment=flickr8k_soft"], ["data=flickr8k"], ["data=coco"]):
        cfg = compose_train(photos)
        assert list(cfg.model.val_metrics) == ["Bleu_4", "CIDEr"]
        assert cfg.callbacks.model_checkpoint.monitor == "val/CIDEr"


def test_scene_scores_on_photos_are_refused_before_training():
    cfg = compose_train(["data=flickr8k", "model.val_metrics=[CIDEr,objects]"])
    with pytest.raises(
        ConfigError, match=r"model.val_metrics names \['objects'\], which score synthetic scenes"
    ):
        check_config(cfg)


@pytest.fixture(scope="module")
def scored_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("scored_run")
    # 12 epochs at lr 1e-2: the tiny decoder starts naming objects, so the scores are not all 0 / NaN
    overrides = [
        *TINY,
        "trainer.max_epochs=12",
        "model.optimizer.lr=1e-2",
        "model.decoding.max_new_tokens=12",
        "logger=csv",
    ]
    best = train(compose_train(overrides, out))
    rows = list(csv.DictReader(next(out.rglob("metrics.csv")).open()))
    vals = [r for r in rows if r.get("val/scene_score")]
    assert any(math.isfinite(float(r["val/grounding"])) for r in vals)  # some object word was matched
    return out, best, vals


def test_validation_logs_the_scores_evaluate_gives_the_same_checkpoint(scored_run):
    out, _, vals = scored_run
    last = vals[-1]  # last.ckpt holds the weights of the last validation
    cfg = compose_train(TINY)
    assert list(cfg.model.val_metrics)[-3:] == ["objects", "grounding", "scene_score"]
    source = SyntheticSource(cfg.data.val.num_images, seed=cfg.data.val.seed, split="val")
    evaluation = evaluate_checkpoint(
        out / "checkpoints" / "last.ckpt", source, tokenizer="simple", metrics=("CIDEr",)
    )
    assert float(last["val/objects"]) == pytest.approx(evaluation.objects["object_accuracy"], abs=1e-6)
    logged, expected = float(last["val/grounding"]), evaluation.grounding["grounding"]
    assert (math.isnan(logged) and math.isnan(expected)) or logged == pytest.approx(expected, abs=1e-6)
    assert float(last["val/CIDEr"]) == pytest.approx(evaluation.report.scores["CIDEr"], abs=1e-6)


def test_the_checkpoint_kept_is_the_first_best_scene_score(scored_run):
    _, best, vals = scored_run
    scores = [float(r["val/scene_score"]) for r in vals]
    first_best = vals[scores.index(max(scores))]
    raw = torch.load(best, weights_only=True)
    assert raw["epoch"] == int(first_best["epoch"])  # one validation per epoch in the tiny run
