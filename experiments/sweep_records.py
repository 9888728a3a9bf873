"""The record of a sweep that outlives its checkpoints: what to commit so a report can be made again.

    python scripts/sweep_records.py SWEEP --out docs/results/flickr8k/soft_vs_hard/xe \\
        [--alias /data/runs/xe=<xe sweep>]

A sweep's checkpoints are too large to keep, and a machine that is handed back takes them along; its
evaluations are small. For every job folder under SWEEP (one with ``.hydra/overrides.yaml``) this copies,
under ``--out/<job>/``:
- ``.hydra/overrides.yaml`` and ``.hydra/hydra.yaml`` cut to the job's number and config choices (the rest
  of Hydra's file names the machine's folders);
- ``run.json`` (best checkpoint, per-epoch history, train time) and ``metrics.csv`` (every
  ``csv/version_*/metrics.csv`` a resumed run logged, in order, one header with every column);
- every evaluation ``scripts/compare.py`` left in ``compare/<setting>/``: ``row.json``, ``results.json``
  (one caption per image) and ``scores.json``.

and writes ``--out/runs.md``, a table of every job recorded there (also from earlier machines; one not
finished is marked so): configuration, seed, the monitored validation
metric per epoch, the best, train time, and BLEU-4 / CIDEr-D at each evaluation setting. A docs page takes
it in with ``--8<-- "<out>/runs.md"``.

``scripts/compare.py`` and ``scripts/soft_vs_hard.py`` read the copy as they read the sweep (compare.py
reuses each ``row.json``; soft_vs_hard.py scores the captions again), so the report, its bootstrap intervals
and a new decoding choice need no checkpoint. Paths are written relative: SWEEP becomes ``<sweep>`` and each
``--alias PATH=NAME`` (an SCST sweep's ``init_from`` names the cross-entropy sweep) becomes NAME. Copying
again replaces a job's record (a job evaluated at one more setting gains its folder). A job that has not
finished (running, stopped or failed) is recorded with what it has (overrides, its unfinished run.json and
logs), so the tables and reports list it as not finished instead of dropping it; it never replaces a
finished record of the same job (an earlier machine's).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import shutil
import sys
from pathlib import Path

import yaml

from experiments.sweep_jobs import (
    SEED_KEY,
    find_jobs,
    finished_summary,
    job_label,
    job_seed,
    natural_key,
    swept_keys,
)

EVALUATION_FILES = ("row.json", "results.json", "scores.json")
# monitors on a 0-1 scale, shown x100 as the docs' tables show scores; any other (a loss) as logged
PERCENT_MONITORS = ("CIDEr", "Bleu", "METEOR", "ROUGE", "SPICE", "objects", "grounding", "scene_score")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweep", type=Path, help="a captioning-train -m sweep folder (or scst_sweep.py's --out)")
    p.add_argument("--out", type=Path, required=True, help="the record folder (created; jobs replaced)")
    p.add_argument(
        "--alias", action="append", default=[], metavar="PATH=NAME", help="write PATH as NAME (repeatable)"
    )
    args = p.parse_args(argv)
    if not args.sweep.is_dir():
        p.error(f"{args.sweep} is not a folder: expected a sweep")
    aliases = {str(args.sweep.resolve()): "<sweep>"}
    for text in args.alias:
        path, sep, name = text.rpartition("=")  # a folder may hold "=" (runs/lr=2e-4), a name does not
        if not sep or not path or not name:
            p.error(f"--alias {text!r}: expected PATH=NAME")
        aliases[str(Path(path).resolve())] = name
    # the longest first, so a folder inside another is written as its own name
    args.aliases = dict(sorted(aliases.items(), key=lambda kv: -len(kv[0])))
    if args.out.resolve().is_relative_to(args.sweep.resolve()):
        p.error(f"--out {args.out} is inside the sweep: its copy would be found as jobs")
    return args


def relative(text: str, aliases: dict[str, str]) -> str:
    """``text`` with each aliased folder written as its name (a whole path part: ``/runs/xe`` is not
    ``/runs/xe2``'s start)."""
    for path, name in aliases.items():
        text = re.sub(re.escape(path) + r"(?![^/\s\"',:\]}])", name.replace("\\", r"\\"), text)
    return text


def merged_metrics(job: Path) -> str | None:
    """Every csv/version_*/metrics.csv of the job in version order, one header with the union of columns."""
    logs = sorted(job.glob("csv/version_*/metrics.csv"), key=lambda p: int(p.parent.name.split("_")[-1]))
    rows, columns = [], {}
    for log in logs:
        with log.open(newline="") as f:
            reader = csv.DictReader(f)
            columns.update(dict.fromkeys(reader.fieldnames or []))
            rows += list(reader)
    if not rows:
        return None
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return text.getvalue()


def copy_job(job: dict, out: Path, aliases: dict[str, str]) -> list[str]:
    """The job's record under ``out`` (replacing an earlier copy); returns the files written."""
    src, dst = job["dir"], out / job["name"]
    if dst.exists():
        shutil.rmtree(dst)
    (dst / ".hydra").mkdir(parents=True)
    written = {".hydra/overrides.yaml": (src / ".hydra" / "overrides.yaml").read_text()}
    hydra = {"job": {"num": job["num"]}, "runtime": {"choices": job["choices"]}}
    written[".hydra/hydra.yaml"] = yaml.safe_dump({"hydra": hydra}, sort_keys=False)
    if (src / "run.json").is_file():  # a job that failed before its first validation has none
        written["run.json"] = (src / "run.json").read_text()
    if (metrics := merged_metrics(src)) is not None:
        written["metrics.csv"] = metrics
    for folder in sorted(p for p in (src / "compare").glob("*") if (p / "row.json").is_file()):
        for name in EVALUATION_FILES:
            if (folder / name).is_file():
                written[f"compare/{folder.name}/{name}"] = (folder / name).read_text()
    for name, text in written.items():
        (dst / name).parent.mkdir(parents=True, exist_ok=True)
        (dst / name).write_text(relative(text, aliases))
    return list(written)


def monitor_text(value: float, monitor: str) -> str:
    return f"{value * 100:.1f}" if any(m in monitor for m in PERCENT_MONITORS) else f"{value:.3g}"


def _within_epoch(entries: list[dict], i: int) -> str:
    """`` (step N)`` for a validation in the middle of its epoch (another of the same epoch follows: a
    ``trainer.max_time`` cut's, or one of several a ``val_check_interval`` schedules), else ''."""
    later = entries[i + 1] if i + 1 < len(entries) else None
    if later is None or later.get("epoch") != entries[i].get("epoch"):
        return ""
    step = entries[i].get("step")
    return f" (step {step})" if step is not None else " (mid-epoch)"


def runs_table(out: Path) -> str:
    """``runs.md``: a row per job of the record, finished or not (marked so): its configuration and seed, the
    monitored validation metric per epoch (the first is epoch 0; one in the middle of an epoch with its step), the best and its epoch, the train time and
    BLEU-4 / CIDEr-D at every evaluation setting. Written from the files alone, so it is made again as jobs
    land and never needs their checkpoints."""
    jobs = find_jobs(out)
    groups = [k for k in swept_keys(jobs) if k != SEED_KEY]
    settings = sorted(
        {p.parent.name for j in jobs for p in (j["dir"] / "compare").glob("*/row.json")}, key=natural_key
    )
    monitor = next(
        (j["summary"]["monitor"] for j in jobs if (j["summary"] or {}).get("monitor")), "val metric"
    )
    head = ["job", "configuration", "seed", f"{monitor} per epoch (from 0)", "best (epoch)", "train time",
            *(f"`{s}` BLEU-4 / CIDEr-D" for s in settings)]  # fmt: skip
    rows = []
    for job in jobs:
        summary = job["summary"] or unfinished_summary(job["dir"] / "run.json")
        entries = summary.get("history") or []
        history = [(h.get("metrics") or {}).get(monitor) for h in entries]
        curve = " / ".join(
            (monitor_text(v, monitor) if v is not None else "–") + _within_epoch(entries, i)
            for i, v in enumerate(history)
        ) or "–"  # fmt: skip
        if job["summary"] is None:
            logged = f"{len(history)} epoch{'s' if len(history) != 1 else ''} logged"
            best, minutes = f"not finished ({logged})", "–"
        else:
            best_epoch = (summary.get("best") or {}).get("epoch", "?")
            score = summary.get("best_score")
            best = f"{monitor_text(score, monitor)} ({best_epoch})" if score is not None else "none"
            minutes = f"{summary['train_seconds'] / 60:.0f} min" if summary.get("train_seconds") else "–"
        scores = []
        for setting in settings:
            row_file = job["dir"] / "compare" / setting / "row.json"
            row = json.loads(row_file.read_text()) if row_file.is_file() else {}
            has = all(isinstance(row.get(m), (int, float)) for m in ("Bleu_4", "CIDEr"))
            scores.append(f"{row['Bleu_4'] * 100:.1f} / {row['CIDEr'] * 100:.1f}" if has else "–")
        cells = [job["name"], job_label(job, groups), str(job_seed(job)), curve, best, minutes, *scores]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join([
        "| " + " | ".join(head) + " |", "|" + "---|" * len(head), *rows,
    ]) + "\n"  # fmt: skip


def unfinished_summary(path: Path) -> dict:
    """The run.json a job writes after each validation before its fit ends, or nothing."""
    return json.loads(path.read_text()) if path.is_file() else {}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    jobs = find_jobs(args.sweep)
    if not jobs:
        raise SystemExit(f"sweep_records.py: no job folders (.hydra/overrides.yaml) under {args.sweep}")
    for job in jobs:
        if job["summary"] is None and finished_summary(args.out / job["name"] / "run.json") is not None:
            print(f"{job['name']}: not finished here; its finished record (an earlier run) is kept")
            continue
        files = copy_job(job, args.out, args.aliases)
        if job["summary"] is None:
            print(
                f"{job['name']}: not finished (running, stopped or failed): recorded as such, {len(files)} files"
            )
            continue
        evaluations = sorted({f.split("/")[1] for f in files if f.startswith("compare/")})
        print(f"{job['name']}: {len(files)} files -> {args.out / job['name']} (evaluations: "
              f"{', '.join(evaluations) or 'none'})")  # fmt: skip
    (args.out / "runs.md").write_text(runs_table(args.out))
    print(f"runs table: {args.out / 'runs.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
