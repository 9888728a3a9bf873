"""scripts/sweep_records.py, the committable record of a sweep: on a made-up sweep, what it copies, what it
leaves out, how it writes machine paths, and that compare.py and soft_vs_hard.py read the copy as a sweep."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from experiments import compare, soft_vs_hard
from experiments import sweep_records as records


def job(sweep: Path, num: int, overrides: list[str], finished: bool = True) -> Path:
    """A job folder as captioning-train -m leaves it, with a checkpoint and two CSV logs (a resume)."""
    folder = sweep / str(num)
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    hydra = {"job": {"num": num}, "runtime": {"cwd": str(sweep.parent), "choices": {"model/decoder": "lstm"}}}
    (folder / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": hydra}))
    (folder / "checkpoints").mkdir()
    best = folder / "checkpoints" / "best.ckpt"
    best.write_bytes(b"weights")
    summary = {"checkpoint": str(best), "finished": finished, "history": [{"epoch": 0}]}
    (folder / "run.json").write_text(json.dumps(summary))
    for version, text in ((0, "epoch,step,val/CIDEr\n0,10,0.3\n"), (1, "epoch,step,lr\n1,20,0.001\n")):
        (folder / "csv" / f"version_{version}").mkdir(parents=True)
        (folder / "csv" / f"version_{version}" / "metrics.csv").write_text(text)
    return folder


def evaluation(folder: Path, setting: str, seed: int) -> None:
    out = folder / "compare" / setting
    out.mkdir(parents=True)
    checkpoint = str(folder / "checkpoints" / "best.ckpt")
    (out / "row.json").write_text(
        json.dumps({"label": "flickr8k_soft", "seed": seed, "checkpoint": checkpoint})
    )
    (out / "results.json").write_text(json.dumps([{"image_id": 1, "caption": "a dog runs"}]))
    (out / "scores.json").write_text(json.dumps({"checkpoint": checkpoint}))
    (out / "predictions.log").write_text("not a record")


def test_the_record_holds_the_small_files_with_paths_made_relative(tmp_path, capsys):
    sweep, xe = tmp_path / "runs" / "scst", tmp_path / "runs" / "xe"
    first = job(sweep, 0, ["seed=0", f"init_from={xe}/0/checkpoints/best.ckpt"])
    evaluation(first, "val-beam5", 0)
    evaluation(first, "val-beam3", 0)
    job(sweep, 1, ["seed=1"], finished=False)
    out = tmp_path / "docs" / "scst"
    assert records.main([str(sweep), "--out", str(out), "--alias", f"{xe}=<xe sweep>"]) == 0
    printed = capsys.readouterr().out
    assert "1: not finished (running, stopped or failed): recorded as such, 4 files" in printed
    assert "0: 10 files" in printed and "(evaluations: val-beam3, val-beam5)" in printed
    copied = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert copied == [
        "0/.hydra/hydra.yaml", "0/.hydra/overrides.yaml",
        *(f"0/compare/{s}/{f}" for s in ("val-beam3", "val-beam5") for f in ("results.json", "row.json", "scores.json")),
        "0/metrics.csv", "0/run.json",
        "1/.hydra/hydra.yaml", "1/.hydra/overrides.yaml", "1/metrics.csv", "1/run.json",  # listed, never dropped
        "runs.md",
    ]  # fmt: skip
    everything = "".join(p.read_text() for p in out.rglob("*") if p.is_file())
    assert str(tmp_path) not in everything  # no machine path is left
    assert yaml.safe_load((out / "0/.hydra/overrides.yaml").read_text()) == [
        "seed=0",
        "init_from=<xe sweep>/0/checkpoints/best.ckpt",
    ]
    assert json.loads((out / "0/run.json").read_text())["checkpoint"] == "<sweep>/0/checkpoints/best.ckpt"
    assert yaml.safe_load((out / "0/.hydra/hydra.yaml").read_text()) == {
        "hydra": {"job": {"num": 0}, "runtime": {"choices": {"model/decoder": "lstm"}}}
    }
    # the resumed run's two logs, in order, under one header with every column
    assert (out / "0/metrics.csv").read_text() == "epoch,step,val/CIDEr,lr\n0,10,0.3,\n1,20,,0.001\n"
    assert "runs table: " in printed


def test_the_runs_table_has_every_job_recorded_or_not_finished(tmp_path):
    sweep, out = tmp_path / "sweep", tmp_path / "record"
    history = [{"epoch": e, "metrics": {"val/CIDEr": c}} for e, c in enumerate((0.2, 0.45, 0.4))]
    done = {"monitor": "val/CIDEr", "best_score": 0.45, "best": {"epoch": 1}, "train_seconds": 3000.0,
            "history": history}  # fmt: skip
    for num, decoder in enumerate(("soft", "hard")):
        folder = job(sweep, num, [f"model/decoder={decoder}", "seed=0"])
        (folder / "run.json").write_text(json.dumps({**done, "checkpoint": "x"}))
        evaluation(folder, "val-beam5", 0)
        row = folder / "compare/val-beam5/row.json"
        row.write_text(json.dumps({**json.loads(row.read_text()), "Bleu_4": 0.2134, "CIDEr": 0.5049 + num}))
    evaluation(sweep / "1", "val-beam5-hard_attention=expected", 0)  # a reading only the hard job takes
    running = job(sweep, 2, ["model/decoder=soft", "seed=1"], finished=False)
    (running / "run.json").write_text(json.dumps({"finished": False, "history": history[:1]}))
    job(sweep, 3, ["model/decoder=hard", "seed=1"], finished=False)
    (sweep / "3" / "run.json").unlink()  # failed before its first validation
    for num in (11, 12):  # recorded from an earlier machine: kept in the table
        (out / str(num) / ".hydra").mkdir(parents=True)
        (out / str(num) / ".hydra" / "overrides.yaml").write_text(
            yaml.safe_dump(["model/decoder=hard", "seed=2"])
        )
    cut = [
        *history[:2],
        {"epoch": 2, "step": 70, "metrics": {"val/CIDEr": 0.3}},
        history[2],
    ]  # a max_time cut
    (out / "11" / "run.json").write_text(json.dumps({**done, "train_seconds": 60.0, "history": cut}))
    # finished without a validation (its time ran out in epoch 0): no best, and said so
    (out / "12" / "run.json").write_text(
        json.dumps({**done, "best": None, "best_score": None, "history": []})
    )
    job(sweep, 12, ["model/decoder=hard", "seed=2"], finished=False)  # a rerun, stopped: the record stays
    assert records.main([str(sweep), "--out", str(out)]) == 0
    lines = (out / "runs.md").read_text().splitlines()
    assert lines[0] == (
        "| job | configuration | seed | val/CIDEr per epoch (from 0) | best (epoch) | train time | `val-beam5` "
        "BLEU-4 / CIDEr-D | `val-beam5-hard_attention=expected` BLEU-4 / CIDEr-D |"
    )
    assert lines[2:] == [
        "| 0 | soft | 0 | 20.0 / 45.0 / 40.0 | 45.0 (1) | 50 min | 21.3 / 50.5 | – |",
        "| 1 | hard | 0 | 20.0 / 45.0 / 40.0 | 45.0 (1) | 50 min | 21.3 / 150.5 | – |",
        "| 2 | soft | 1 | 20.0 | not finished (1 epoch logged) | – | – | – |",
        "| 3 | hard | 1 | – | not finished (0 epochs logged) | – | – | – |",
        "| 11 | hard | 2 | 20.0 / 45.0 / 30.0 (step 70) / 40.0 | 45.0 (1) | 1 min | – | – |",
        "| 12 | hard | 2 | – | none | 50 min | – | – |",
    ]
    runs, missing = soft_vs_hard.find_runs(out)  # the report lists what has no captions, never drops it
    assert sorted(runs) == ["hard", "soft"] and missing == ["2", "3", "11", "12"]


def test_compare_and_soft_vs_hard_read_the_record_as_a_sweep(tmp_path):
    sweep = tmp_path / "sweep"
    for seed in (0, 1):
        evaluation(job(sweep, seed, [f"seed={seed}"]), "val-beam5", seed)
    job(sweep, 2, ["seed=2"])  # finished, never evaluated
    out = tmp_path / "record"
    records.main([str(sweep), "--out", str(out)])
    jobs = compare.find_jobs(out)
    assert [(j["name"], j["num"], j["summary"]["finished"]) for j in jobs] == [("0", 0, True), ("1", 1, True),
                                                                               ("2", 2, True)]  # fmt: skip
    runs, missing = soft_vs_hard.find_runs(out)
    assert runs == {
        # only the seed is swept: the decoder names the configuration (the record keeps the config choices)
        "lstm": {s: {"val-beam5": out / str(s) / "compare/val-beam5/results.json"} for s in (0, 1)}
    }
    assert missing == ["2"]  # listed as without captions, not dropped


def test_copying_again_replaces_a_job_and_keeps_the_others(tmp_path):
    sweep, out = tmp_path / "sweep", tmp_path / "record"
    first = job(sweep, 0, ["seed=0"])
    records.main([str(sweep), "--out", str(out)])
    evaluation(first, "val-beam5", 0)
    (out / "9").mkdir()  # a job recorded from an earlier machine
    records.main([str(sweep), "--out", str(out)])
    assert (out / "0/compare/val-beam5/results.json").is_file() and (out / "9").is_dir()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["{tmp}/missing", "--out", "{tmp}/r"], "is not a folder"),
        (["{tmp}", "--out", "{tmp}/r", "--alias", "nothing"], "--alias 'nothing': expected PATH=NAME"),
        (["{tmp}", "--out", "{tmp}/inside"], "is inside the sweep"),
    ],
)
def test_bad_arguments_are_named(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit):
        records.main([a.format(tmp=tmp_path) for a in argv])
    assert message in capsys.readouterr().err


def test_an_alias_replaces_whole_path_parts_only():
    aliases = {"/runs/xe": "<xe sweep>"}
    text = 'init_from=/runs/xe/0/best.ckpt "/runs/xe" /runs/xe2/0/best.ckpt /runs/xe'
    assert records.relative(text, aliases) == (
        'init_from=<xe sweep>/0/best.ckpt "<xe sweep>" /runs/xe2/0/best.ckpt <xe sweep>'
    )
