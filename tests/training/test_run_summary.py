"""RunSummary (captioning/training/callbacks/run_summary.py): run.json, what compare.py reads per sweep job."""

from __future__ import annotations

import json

from captioning.training.train import train

from support import TINY, compose_train

FAST = [*TINY, "trainer.limit_train_batches=2", "trainer.enable_progress_bar=false"]


def test_run_json_names_the_best_checkpoint_with_its_metrics_and_survives_a_resume(tmp_path):
    best = train(compose_train([*FAST, "trainer.max_epochs=2"], tmp_path))
    first = json.loads((tmp_path / "run.json").read_text())
    assert first["finished"] and first["checkpoint"] == best
    assert [h["epoch"] for h in first["history"]] == [0, 1] and first["last"] == first["history"][-1]
    assert first["best"] in first["history"]
    assert first["best"]["metrics"][first["monitor"]] == first["best_score"]
    assert first["train_seconds"] > 0 and first["params"]["trainable"] > 0 and first["global_step"] == 4

    # Resumed for one more epoch: the earlier validations and train time are kept.
    best = train(compose_train([*FAST, "trainer.max_epochs=3", "ckpt_path=last"], tmp_path))
    resumed = json.loads((tmp_path / "run.json").read_text())
    assert resumed["finished"] and resumed["checkpoint"] == best and resumed["global_step"] == 6
    assert resumed["history"][:2] == first["history"] and len(resumed["history"]) == 3
    assert resumed["best"]["metrics"][resumed["monitor"]] == resumed["best_score"]
    assert resumed["train_seconds"] > first["train_seconds"]


def test_without_validation_last_ckpt_stands_in(tmp_path):
    best = train(compose_train([*FAST, "trainer.max_epochs=1", "trainer.limit_val_batches=0"], tmp_path))
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["checkpoint"] == best == str(tmp_path / "checkpoints" / "last.ckpt")
    assert summary["best"] is None and summary["history"] == [] and summary["finished"]
