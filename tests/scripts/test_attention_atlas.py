"""scripts/attention_atlas.py: teacher-forced attention equals the decoder's own, entropies are right."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from captioning import Captioner
from captioning.data.sources import SyntheticSource
from experiments import attention_atlas

ROOT = Path(__file__).resolve().parents[2]

MODEL = ROOT / "docs" / "models" / "synthetic_soft.safetensors"


def test_teacher_forced_maps_are_the_ones_that_wrote_the_caption():
    model = Captioner.from_checkpoint(MODEL)
    image = SyntheticSource(num_images=1, seed=3, split="val").image(0)
    result = model.caption(image)[0]
    maps = attention_atlas.alphas(model, image, result.tokens)  # (T, L)
    assert maps.shape == (len(result.tokens), model.grid[0] * model.grid[1])
    np.testing.assert_allclose(maps, result.attention.reshape(len(result.tokens), -1)[: len(maps)], atol=1e-5)


def test_entropy_of_uniform_and_one_hot_maps():
    cells = 49
    uniform, one_hot = np.full((3, cells), 1 / cells), np.eye(cells)[:3]
    u, h = attention_atlas.entropy_stats([uniform], cells), attention_atlas.entropy_stats([one_hot], cells)
    assert u["entropy_fraction_of_uniform"] == pytest.approx(1.0) and u["entropy_mean"] == pytest.approx(
        math.log(cells)
    )
    assert h["entropy_mean"] == pytest.approx(0.0, abs=1e-9) and h["top_cell_mass_mean"] == 1.0
    # whether the peak moves: 3 words on 3 cells, against 4 words of which 3 sit on one cell
    assert h["distinct_peak_cells_per_caption"] == 3 and h[
        "words_on_the_captions_modal_cell"
    ] == pytest.approx(1 / 3)
    stuck = np.eye(cells)[[5, 5, 9, 5]]
    both = attention_atlas.entropy_stats([one_hot, stuck], cells)
    assert both["distinct_peak_cells_per_caption"] == pytest.approx((3 + 2) / 2)
    assert both["words_on_the_captions_modal_cell"] == pytest.approx((1 / 3 + 3 / 4) / 2)


def test_script_writes_one_figure_per_photo_and_the_entropies(tmp_path):
    out = tmp_path / "atlas"
    args = ["--data", "synthetic", "--num-images", "2", "--entropy-images", "2", "--out", str(out),
            "--override", "data.val.num_images=10", f"soft={MODEL}", f"again={MODEL}"]  # fmt: skip
    assert attention_atlas.main(args) == 0
    report = json.loads((out / "entropy.json").read_text())
    assert [p["figure"] for p in report["photos"]] == ["photo-0.jpg", "photo-5.jpg"]
    assert all((out / p["figure"]).stat().st_size > 5000 for p in report["photos"])
    assert report["entropy"]["soft"] == report["entropy"]["again"]  # same model, same numbers
    assert 0 < report["entropy"]["soft"]["entropy_fraction_of_uniform"] < 1
