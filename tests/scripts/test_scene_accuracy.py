"""scripts/scene_accuracy.py: the three renderers' scenes, and the per-checkpoint report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from experiments import scene_accuracy

import third_renderer

ROOT = Path(__file__).resolve().parents[2]

MODEL = ROOT / "docs" / "models" / "synthetic_soft.safetensors"


def test_third_renderer_scenes_are_its_own_with_its_references():
    scenes = scene_accuracy.scenes("third", 3)
    rng = np.random.default_rng(4242)
    for image, objects, refs in scenes:
        img, objs = third_renderer.render(rng)
        assert np.array_equal(np.asarray(image), img) and objects == objs
        assert refs == third_renderer.references(objs)
    with pytest.raises(ValueError, match="expected one of"):
        scene_accuracy.scenes("fourth", 1)


def test_report_has_every_checkpoint_and_renderer(tmp_path, monkeypatch):
    out = tmp_path / "acc.json"
    monkeypatch.setattr(sys, "argv", ["scene_accuracy.py", str(MODEL), str(MODEL), "--scenes", "6",
                                      "--num-beams", "1", "--json", str(out)])  # fmt: skip
    assert scene_accuracy.main() == 0
    payload = json.loads(out.read_text())
    assert [r["checkpoint"] for r in payload["runs"]] == [MODEL.name, MODEL.name]
    first, second = (run["rows"] for run in payload["runs"])
    assert [r["renderer"] for r in first] == ["project", "alt", "third"]
    assert first == second  # the same model on the same scenes: the same numbers
    assert all(0 <= r["object_accuracy"] <= 1 and r["scenes"] == 6 for r in first)
