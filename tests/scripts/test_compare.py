"""scripts/compare.py, the aggregator of a ``captioning-train -m`` sweep: a real joblib multirun of tiny
synthetic runs (the table, the chart, the per-job files), and made-up sweep folders (grouping, left-out
jobs, the seed count, --replot) that need no training."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from experiments import compare

from support import DECODERS, TINY

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


def per_run_rows(markdown: str) -> list[dict[str, str]]:
    """The per-run table (after "Per run:"): one dict per seed row."""
    lines = [line for line in markdown.split("Per run:", 1)[1].splitlines() if line.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(header, (c.strip() for c in line.strip("|").split("|")))) for line in lines[1:]]


def captioning_train() -> list[str]:
    script = Path(sys.executable).with_name("captioning-train")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "captioning.training.train"]


@pytest.mark.slow  # ~60 s on 2 busy cores
def test_joblib_multirun_of_two_decoders_and_two_seeds_is_aggregated(tmp_path, capsys):
    """``captioning-train -m hydra/launcher=local`` (joblib, 2 jobs at once) trains 2 decoders x 2 seeds;
    every job leaves run.json; compare.py finds the 4 jobs, groups them by decoder and tabulates them."""
    if PAIR[0] == PAIR[1]:
        pytest.skip("only the soft decoder exists")
    sweep = tmp_path / "multirun" / "sweep"
    cmd = [
        *captioning_train(), "-m", "hydra/launcher=local", "hydra.launcher.n_jobs=2",
        f"model/decoder={','.join(PAIR)}", "seed=0,1", *TINY, "trainer.max_epochs=1",
        "trainer.limit_train_batches=2", "trainer.enable_progress_bar=false", f"hydra.sweep.dir={sweep}",
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"multirun: {time.perf_counter() - start:.1f} s")
    assert done.stdout.count("best checkpoint: ") == 4
    jobs = sorted(p.parent.parent for p in sweep.rglob(".hydra/overrides.yaml"))
    assert [j.name for j in jobs] == ["0", "1", "2", "3"]
    summaries = {}
    for job in jobs:
        summary = json.loads((job / "run.json").read_text())
        assert Path(summary["checkpoint"]).is_file() and Path(summary["checkpoint"]).parent == (
            job / "checkpoints"
        )
        assert summary["best"]["metrics"][summary["monitor"]] == summary["best_score"]
        assert summary["train_seconds"] > 0 and summary["params"]["trainable"] > 0
        summaries[job.name] = summary

    argv = [
        str(sweep), "--split", "val", "--allow-few-seeds", "--tokenizer", "simple",
        "--metrics", FAST_METRICS, "--alt-scenes", "0",
    ]  # fmt: skip
    assert compare.main(argv) == 0
    runs = json.loads((sweep / "results.json").read_text())
    assert len(runs) == 4
    assert [(r["label"], r["seed"]) for r in runs] == [(d, s) for d in PAIR for s in (0, 1)]
    for r in runs:
        job = sweep / r["job"]
        assert f"model/decoder={r['label']}" in r["overrides"] and f"seed={r['seed']}" in r["overrides"]
        assert (sweep / r["checkpoint"]).resolve() == Path(summaries[r["job"]]["checkpoint"]).resolve()
        assert r["train_seconds"] == summaries[r["job"]]["train_seconds"]
        scores = json.loads((job / "compare" / "val-beam3" / "scores.json").read_text())
        assert scores["scores"]["CIDEr"] == r["CIDEr"] and scores["decoding"]["num_beams"] == 3
        assert len(json.loads((job / "compare" / "val-beam3" / "results.json").read_text())) == 8  # val
        assert r["grounding"] is not None  # synthetic scenes (NaN when no object word was generated)

    text = (sweep / "comparison.md").read_text()
    rows = table_rows(text)
    assert list(rows) == PAIR  # 2 groups: the seed is not a configuration
    for decoder in PAIR:
        mine = [r for r in runs if r["label"] == decoder]
        assert rows[decoder]["runs"] == "2"
        for key, title in (("Bleu_4", "BLEU-4"), ("CIDEr", "CIDEr-D"), ("ROUGE_L", "ROUGE-L")):
            values = [r[key] for r in mine]
            assert rows[decoder][title] == f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"
        assert rows[decoder]["trainable params"] == f"{mine[0]['params']:,}"
    assert "METEOR" not in rows[PAIR[0]]  # not requested
    seeds = per_run_rows(text)
    assert [(s["configuration"], s["seed"]) for s in seeds] == [(d, str(k)) for d in PAIR for k in (0, 1)]
    assert [s["CIDEr-D"] for s in seeds] == [f"{r['CIDEr']:.4f}" for r in runs]
    assert "2 runs trained at once by JoblibLauncher" in text

    png = np.asarray(Image.open(sweep / "comparison.png"))
    assert png.shape[0] > 200 and png.shape[1] > 400 and png[..., :3].std() > 5

    # A second call reuses every job's evaluation instead of evaluating again.
    capsys.readouterr()
    assert compare.main(argv) == 0
    assert capsys.readouterr().out.count("reusing") == 4
    assert json.loads((sweep / "results.json").read_text()) == runs


# ------------------------------------------------------------------ made-up sweeps: no training needed

ARGV = ["--split", "test", "--tokenizer", "simple", "--metrics", "Bleu_4,CIDEr", "--alt-scenes", "0"]


def fake_job(sweep: Path, num: int, overrides: list[str], cider: float | None, finished: bool = True) -> None:
    """A job folder as a launcher leaves it, with its evaluation already in JOB/compare/ (no checkpoint)."""
    job = sweep / str(num)
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (job / ".hydra" / "hydra.yaml").write_text(
        yaml.safe_dump({"hydra": {"job": {"num": num}, "runtime": {"choices": {"model/decoder": "soft"}}}})
    )
    checkpoint = job / "checkpoints" / "best.ckpt"
    if not finished:  # stopped after a validation: run.json is there, unfinished
        (job / "run.json").write_text(json.dumps({"checkpoint": str(checkpoint), "finished": False}))
        return
    (job / "run.json").write_text(json.dumps({"checkpoint": str(checkpoint), "train_seconds": 60.0 + num}))
    settings = compare.eval_settings(compare.parse_args([str(sweep), *ARGV]))
    row = {
        "label": "?", "job": str(num), "seed": int(dict(o.split("=") for o in overrides)["seed"]),
        "checkpoint": str(checkpoint), "train_seconds": 60.0 + num, "params": 1000, "Bleu_4": cider / 10,
        "CIDEr": cider, "skipped": {}, "num_images": 8, "tokenizer": "simple",
        "decoding": {"num_beams": 3, "max_new_tokens": 6}, "settings": settings,
    }  # fmt: skip
    (job / "compare" / "test-beam3").mkdir(parents=True)
    (job / "compare" / "test-beam3" / "row.json").write_text(json.dumps(row))


def test_jobs_are_grouped_by_the_swept_keys_other_than_seed(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    ciders, num = {}, 0
    for decoder in ("a", "b"):
        for batch in (8, 16):
            for seed in (0, 1, 2):
                cider = 0.1 * num + 0.01 * seed**2
                overrides = [
                    f"model/decoder={decoder}",
                    f"data.batch_size={batch}",
                    f"seed={seed}",
                    "debug=tiny",
                ]
                fake_job(sweep, num, overrides, cider)
                ciders.setdefault(f"model/decoder={decoder} data.batch_size={batch}", []).append(cider)
                num += 1
    fake_job(
        sweep, num, ["model/decoder=a", "data.batch_size=8", "seed=3", "debug=tiny"], None, finished=False
    )
    out = tmp_path / "table"
    assert compare.main([str(sweep), "--out-dir", str(out), *ARGV]) == 0
    assert "did not finish" in capsys.readouterr().err

    text = (out / "comparison.md").read_text()
    rows = table_rows(text)
    assert list(rows) == list(ciders)  # 4 configurations in sweep order; debug=tiny (common) is not one
    for label, values in ciders.items():
        assert rows[label]["runs"] == "3"
        assert rows[label]["CIDEr-D"] == f"{np.mean(values):.4f} ± {np.std(values, ddof=1):.4f}"
        assert rows[label]["train time (min)"].startswith("1.")
    assert len(per_run_rows(text)) == 12
    assert "Overrides of every job: `debug=tiny`" in text
    assert f"Left out (not finished: no finished run.json): {num}" in text
    results = json.loads((out / "results.json").read_text())
    assert results[0]["checkpoint"] == os.path.relpath(sweep / "0" / "checkpoints" / "best.ckpt", out)

    (out / "comparison.png").unlink()
    assert compare.main(["--replot", str(out / "results.json")]) == 0
    assert (out / "comparison.png").is_file()


def test_scst_jobs_started_from_their_own_xe_runs_group_by_configuration(tmp_path):
    sweep = tmp_path / "scst"
    for num, (decoder, seed) in enumerate((d, s) for d in ("a", "b") for s in (0, 1, 2)):
        overrides = [f"model/decoder={decoder}", f"seed={seed}", f"init_from=/xe/{num}/best.ckpt",
                     "ckpt_path=auto", f"hydra.run.dir=/scst/{num}", "debug=tiny"]  # fmt: skip
        fake_job(sweep, num, overrides, 0.1 * num)
    out = tmp_path / "table"
    assert compare.main([str(sweep), "--out-dir", str(out), *ARGV]) == 0
    text = (out / "comparison.md").read_text()
    rows = table_rows(text)
    assert list(rows) == ["a", "b"] and rows["a"]["runs"] == rows["b"]["runs"] == "3"
    assert "Overrides of every job: `debug=tiny`" in text  # init_from is not called common either


def test_decoding_settings_have_their_own_folders_and_only_filters_jobs(tmp_path, capsys):
    args = compare.parse_args([str(tmp_path), "--split", "val", "--num-beams", "5", "--decoding",
                               "no_repeat_ngram_size=3", "--decoding", "length_penalty=0.5"])  # fmt: skip
    assert args.decoding == {"length_penalty": 0.5, "no_repeat_ngram_size": 3}  # typed, in name order
    assert compare.setting_name(args) == "val-beam5-length_penalty=0.5-no_repeat_ngram_size=3"
    assert (
        compare.eval_settings(args)["decoding"] == args.decoding
    )  # a cached row at another setting is not reused
    for bad, message in (("bogus=1", "unknown decoding option 'bogus'"), ("num_beams=3", "--num-beams"),
                         ("length_penalty", "expected NAME=VALUE")):  # fmt: skip
        with pytest.raises(SystemExit):
            compare.parse_args([str(tmp_path), "--decoding", bad])
        assert message in capsys.readouterr().err
    sweep = tmp_path / "sweep"
    for num, (decoder, seed) in enumerate((d, s) for d in ("a", "b") for s in (0, 1, 2)):
        fake_job(sweep, num, [f"model/decoder={decoder}", f"seed={seed}"], 0.1 * num)
    out = tmp_path / "table"
    assert compare.main([str(sweep), "--out-dir", str(out), "--only", "model/decoder=b", *ARGV]) == 0
    assert list(table_rows((out / "comparison.md").read_text())) == ["b"]
    with pytest.raises(SystemExit, match="no finished job has the overrides --only model/decoder=c"):
        compare.main([str(sweep), "--out-dir", str(out), "--only", "model/decoder=c", *ARGV])


def test_compare_asks_for_three_seeds(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    for num, (decoder, seed) in enumerate((d, s) for d in ("a", "b") for s in (0, 1)):
        fake_job(sweep, num, [f"model/decoder={decoder}", f"seed={seed}"], 0.5)
    assert compare.main([str(sweep), *ARGV]) == 2
    assert "needs >= 3 seeds" in capsys.readouterr().err and not (sweep / "results.json").exists()
    assert compare.main([str(sweep), *ARGV, "--allow-few-seeds"]) == 0
    assert list(table_rows((sweep / "comparison.md").read_text())) == ["a", "b"]
    with pytest.raises(SystemExit):
        compare.parse_args([])  # neither a sweep folder nor --replot
