"""Same seed and config on CPU -> identical metrics, weights and captions; another seed -> another run."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
from PIL import Image

from captioning.checkpoints.load import load_checkpoint
from captioning.data.synthetic import render_scene
from captioning.inference.captioner import Captioner
from captioning.training.train import train

from support import TINY, compose_train

# 8 scenes x 5 captions / batch 8 = 5 optimizer steps, then a validation pass that decodes 8 images.
RUN = [*TINY, "data.train.num_images=8", "trainer.max_epochs=1", "logger=csv", "trainer.log_every_n_steps=1"]


def _run(out: Path, seed: int) -> dict:
    best = train(compose_train([*RUN, f"seed={seed}"], out))
    (metrics_csv,) = (out / "csv").rglob("metrics.csv")
    with metrics_csv.open() as f:
        rows = list(csv.DictReader(f))
    model = load_checkpoint(best)
    scenes = [Image.fromarray(render_scene((7, i)).image) for i in range(6)]
    captions = Captioner(model).caption(scenes, num_beams=2)
    return {
        "rows": rows,
        "weights": model.net.state_dict(),
        "captions": [(c.caption, c.score, c.attention.tolist()) for c in captions],
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    return {
        name: _run(tmp_path_factory.mktemp(name), seed)
        for name, seed in (("first", 0), ("again", 0), ("other_seed", 1))
    }


def test_same_seed_gives_identical_metrics(runs) -> None:
    first, again = runs["first"]["rows"], runs["again"]["rows"]
    assert len(first) >= 6  # 5 training steps + the validation row
    columns = set(first[0])
    assert {"train/loss", "val/loss", "val/Bleu_4", "val/CIDEr"} <= columns
    assert first == again  # every logged value, as written, step by step


def test_same_seed_gives_identical_weights_and_captions(runs) -> None:
    first, again = runs["first"], runs["again"]
    assert first["weights"].keys() == again["weights"].keys()
    for name, tensor in first["weights"].items():
        assert torch.equal(tensor, again["weights"][name]), name
    assert first["captions"] == again["captions"]  # words, scores and attention maps, exactly


def test_another_seed_gives_another_run(runs) -> None:
    first, other = runs["first"], runs["other_seed"]
    losses = [row["train/loss"] for row in first["rows"] if row.get("train/loss")]
    other_losses = [row["train/loss"] for row in other["rows"] if row.get("train/loss")]
    assert len(losses) == len(other_losses) == 5 and losses != other_losses
    assert any(not torch.equal(t, other["weights"][k]) for k, t in first["weights"].items())
