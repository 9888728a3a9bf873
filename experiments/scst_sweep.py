"""SCST from every finished job of a cross-entropy sweep, one shared recipe: a comparison's second phase.

    python scripts/scst_sweep.py XE_SWEEP --out SCST_SWEEP [--jobs 2] [--only KEY=VALUE] [--dry-run] [RECIPE ...]
    python scripts/scst_sweep.py multirun/xe --out multirun/scst --jobs 2 \\
        model.optimizer.lr=2.0e-4 model.scheduler.warmup_steps=50 trainer.max_epochs=5
    python scripts/compare.py multirun/scst --split val       # grouped by the XE jobs' configurations

Self-critical training starts from a cross-entropy model's weights (``init_from``), so a sweep of SCST runs
cannot be one more ``captioning-train -m``: each job must start from its own XE job's best checkpoint, with
that job's experiment and seed. This script pairs them. Every finished job N of XE_SWEEP (a folder with
``.hydra/overrides.yaml`` and a finished ``run.json``, as ``compare.py`` finds them) becomes

    captioning-train <job N's overrides> objective=scst init_from=<job N's best checkpoint> <RECIPE>
        hydra.run.dir=SCST_SWEEP/N ckpt_path=auto

Job N's overrides keep their order; the keys that locate a run (``init_from``, ``ckpt_path``, ``hydra.*``)
are dropped, and a key the recipe sets takes the recipe's value (the recipe is what the runs share).
``ckpt_path=auto`` makes the command re-runnable: an SCST job that finished is not started again, a stopped
one resumes from its ``last.ckpt``. A job of XE_SWEEP that has not finished is listed as left out (go on
with the XE sweep first: its command plus ``ckpt_path=auto``). Each job's output goes to
``SCST_SWEEP/logs/N.log``; a job that fails is named with the end of its log, the others still run, and
the exit status is 1. ``OMP_NUM_THREADS`` is 1 in each job unless set: ``--jobs`` jobs share the cores.

``--only seed=1`` (repeatable, as ``compare.py``'s) takes only the XE jobs launched with that override: one
call per core, each following its own cross-entropy run as it ends; calls whose filters do not overlap never
start the same SCST run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import yaml

from experiments.sweep_jobs import (
    describe_only,
    find_jobs,
    finished_summary,
    has_overrides,
    is_run_key,
    job_checkpoint,
    only_filter,
    override_problem,
    parse_override,
    with_overrides,
)

SCST = ["objective=scst"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "xe_sweep", type=Path, help="the cross-entropy sweep (hydra.sweep.dir of captioning-train -m)"
    )
    p.add_argument(
        "--out", type=Path, required=True, help="the SCST sweep's folder (one job folder per XE job)"
    )
    p.add_argument("--jobs", type=int, default=1, help="SCST runs at once (default 1)")
    p.add_argument("--dry-run", action="store_true", help="print each job's command, run nothing")
    p.add_argument(
        "--only", action="append", default=[], metavar="KEY=VALUE",
        help="SCST only the XE jobs launched with this override (repeatable, as compare.py's), e.g. seed=1: "
        "calls on one sweep whose filters do not overlap never start the same run",
    )  # fmt: skip
    p.add_argument(
        "recipe", nargs="*", help="Hydra overrides every SCST run shares, e.g. model.optimizer.lr=2e-4"
    )
    args = p.parse_intermixed_args(argv)  # the recipe may follow the options
    if not args.xe_sweep.is_dir():
        p.error(f"{args.xe_sweep}: no such folder (expected the XE sweep's hydra.sweep.dir)")
    if args.out.resolve().is_relative_to(args.xe_sweep.resolve()):
        p.error(
            f"--out {args.out}: inside the XE sweep, whose jobs are found at any depth; give another folder"
        )
    if args.jobs < 1:
        p.error(f"--jobs {args.jobs}: expected 1 or more")
    try:
        args.only = only_filter(args.only)
    except ValueError as err:
        p.error(str(err))
    for text in args.recipe:
        if why := override_problem(text):
            p.error(f"recipe override {text!r}: {why}")
    return args


def raw_overrides(job: dict) -> list[str]:
    """The job's overrides as it was launched with them (``+key=v`` kept), from .hydra/overrides.yaml."""
    return [str(o) for o in yaml.safe_load((job["dir"] / ".hydra" / "overrides.yaml").read_text()) or []]


def scst_overrides(job: dict, checkpoint: Path, recipe: list[str], run_dir: Path) -> list[str]:
    """The SCST run's overrides: the XE job's (without run keys or keys the recipe sets), then SCST's."""
    launched = [o for o in raw_overrides(job) if not is_run_key(parse_override(o)[0])]
    return [
        *with_overrides(launched, [*SCST, *recipe]),
        f"init_from={checkpoint.resolve()}",
        f"hydra.run.dir={run_dir.resolve()}",
        "ckpt_path=auto",
    ]


def captioning_train() -> list[str]:
    """This environment's ``captioning-train`` (beside the interpreter), else the module."""
    script = Path(sys.executable).with_name("captioning-train")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "captioning.training.train"]


def plan(args: argparse.Namespace) -> tuple[list[tuple[str, list[str]]], list[str], list[str]]:
    """(name, overrides) of each SCST run to start, the names of runs already finished, and one line per
    XE job left out (not finished, or its checkpoint missing)."""
    todo, done, left_out = [], [], []
    for job in find_jobs(args.xe_sweep):
        if not has_overrides(job, args.only):
            continue
        checkpoint = job_checkpoint(job)
        if job["summary"] is None:
            left_out.append(f"{job['name']}: its cross-entropy run has not finished (no finished run.json)")
            continue
        if checkpoint is None:
            left_out.append(
                f"{job['name']}: run.json names {job['summary'].get('checkpoint')!r}, which is missing"
            )
            continue
        run_dir = args.out / job["name"]
        if finished_summary(run_dir / "run.json") is not None:
            done.append(job["name"])
            continue
        todo.append((job["name"], scst_overrides(job, checkpoint, args.recipe, run_dir)))
    return todo, done, left_out


def run_one(name: str, overrides: list[str], log: Path) -> tuple[str, int]:
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    with open(log, "a") as out:
        done = subprocess.run(
            [*captioning_train(), *overrides], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    return name, done.returncode


def log_tail(log: Path, lines: int = 5) -> str:
    text = log.read_text(errors="replace").strip().splitlines() if log.is_file() else []
    return "\n    ".join(text[-lines:]) or "(empty log)"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    todo, done, left_out = plan(args)
    for line in left_out:
        print(f"left out: {line}")
    for name in done:
        print(f"{name}: SCST finished before ({args.out / name / 'run.json'})")
    if not todo:
        where = args.xe_sweep if not args.only else f"{args.xe_sweep} with {describe_only(args.only)}"
        print("nothing to run" + ("" if done else f": no finished cross-entropy job in {where}"))
        return 0 if done else 1
    if args.dry_run:
        for name, overrides in todo:
            print(f"{name}: captioning-train {' '.join(overrides)}")
        return 0
    print(f"{len(todo)} SCST runs, {args.jobs} at a time; logs in {args.out / 'logs'}")
    failed = []
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_one, name, o, args.out / "logs" / f"{name}.log") for name, o in todo]
        for future in as_completed(futures):  # reported as they end
            name, code = future.result()
            if code == 0:
                print(f"{name}: finished ({args.out / name})")
            else:
                failed.append(name)
                tail = log_tail(args.out / "logs" / f"{name}.log")
                print(f"{name}: FAILED (exit {code}); the end of its log:\n    {tail}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
