"""scripts/compare.py on tiny synthetic runs: the table, the chart and the per-run files."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from conftest import DECODERS, REPO, TINY
from helpers import load_script

compare = load_script("compare")

# Two decoders that exist (hard attention and the transformer are written concurrently).
PAIR = ["soft", next((d for d in ("hard_gumbel", "hard_reinforce", "transformer") if d in DECODERS), "soft")]
FAST_METRICS = "Bleu_1,Bleu_2,Bleu_3,Bleu_4,ROUGE_L,CIDEr"  # no Java: METEOR is covered by test_evaluation


def table_rows(markdown: str) -> dict[str, list[str]]:
    """First markdown table: configuration -> its cells."""
    lines = [line for line in markdown.splitlines() if line.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != len(header):
            break  # the per-run table starts
        rows[cells[0]] = dict(zip(header, cells))
    return rows


def test_compare_tabulates_mean_and_std_over_seeds(tmp_path, capsys):
    if PAIR[0] == PAIR[1]:
        pytest.skip("only the soft decoder exists")
    out = tmp_path / "cmp"
    argv = [
        "--decoders", ",".join(PAIR), "--seeds", "0,1", "--allow-few-seeds", "--out-dir", str(out),
        "--tokenizer", "simple", "--metrics", FAST_METRICS, "--alt-scenes", "6",
        *TINY, "trainer.max_epochs=1", "trainer.limit_train_batches=2", "trainer.enable_progress_bar=false",
    ]  # fmt: skip
    assert compare.main(argv) == 0

    runs = json.loads((out / "results.json").read_text())
    assert [(r["label"], r["seed"]) for r in runs] == [(d, s) for d in PAIR for s in (0, 1)]
    for r in runs:
        run_dir = out / "runs" / f"{r['label']}-seed{r['seed']}"
        scores = json.loads((run_dir / "scores.json").read_text())
        assert scores["scores"]["CIDEr"] == r["CIDEr"] and scores["decoding"]["num_beams"] == 3
        assert len(json.loads((run_dir / "results.json").read_text())) == 8  # data.test.num_images
        assert r["train_seconds"] > 0 and r["params"] > 0
        assert r["grounding"] is not None  # synthetic scenes (NaN when no object word was generated)
    # The alt-renderer columns are scene_accuracy's numbers for the same checkpoint and beam.
    alt = compare.scene_measure(compare.Captioner.from_checkpoint(out / runs[0]["checkpoint"]), "alt", 6, 3)
    assert runs[0]["objects_alt"] == alt["object_accuracy"] and 0.0 <= runs[0]["objects_alt"] <= 1.0

    rows = table_rows((out / "comparison.md").read_text())
    assert list(rows) == PAIR
    for decoder in PAIR:
        mine = [r for r in runs if r["label"] == decoder]
        assert rows[decoder]["runs"] == "2"
        for key, title in (("Bleu_4", "BLEU-4"), ("CIDEr", "CIDEr-D"), ("ROUGE_L", "ROUGE-L")):
            values = [r[key] for r in mine]
            assert rows[decoder][title] == f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"
        assert rows[decoder]["trainable params"] == f"{mine[0]['params']:,}"
        assert "grounding" in rows[decoder] and "objects right (alt)" in rows[decoder]  # synthetic scenes
    assert "METEOR" not in rows[PAIR[0]]  # not requested

    png = np.asarray(Image.open(out / "comparison.png"))
    assert png.shape[0] > 200 and png.shape[1] > 400 and png[..., :3].std() > 5

    # A second call reuses every finished run instead of training again.
    capsys.readouterr()
    assert compare.main(argv) == 0
    assert capsys.readouterr().out.count("reusing") == 4
    assert json.loads((out / "results.json").read_text()) == runs


def test_compare_asks_for_three_seeds(tmp_path):
    with pytest.raises(SystemExit):
        compare.parse_args(["--seeds", "0,1", "--out-dir", str(tmp_path)])
    args = compare.parse_args(
        ["--experiments", "flickr8k_soft,flickr8k_hard_gumbel", "--out-dir", str(tmp_path)]
    )
    assert args.seeds == [0, 1, 2]
    assert args.runs == [
        ("flickr8k_soft", "experiment=flickr8k_soft"),
        ("flickr8k_hard_gumbel", "experiment=flickr8k_hard_gumbel"),
    ]


def test_compare_trains_runs_in_parallel_processes(tmp_path):
    """--jobs 2: the (configuration, seed) runs go to two spawned processes, the table covers them all."""
    if PAIR[0] == PAIR[1]:
        pytest.skip("only the soft decoder exists")
    out = tmp_path / "cmp"
    cmd = [
        sys.executable, str(REPO / "scripts" / "compare.py"), "--jobs", "2",
        "--decoders", ",".join(PAIR), "--seeds", "0,1", "--allow-few-seeds", "--out-dir", str(out),
        "--tokenizer", "simple", "--metrics", FAST_METRICS,
        *TINY, "trainer.max_epochs=1", "trainer.limit_train_batches=2", "trainer.enable_progress_bar=false",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads((out / "results.json").read_text())
    assert [(r["label"], r["seed"]) for r in runs] == [(d, s) for d in PAIR for s in (0, 1)]
    assert all((out / "runs" / f"{r['label']}-seed{r['seed']}" / "scores.json").is_file() for r in runs)
    assert "2 runs trained at once" in (out / "comparison.md").read_text()
    assert list(table_rows((out / "comparison.md").read_text())) == PAIR
