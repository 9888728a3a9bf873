"""The whole soft-vs-hard comparison as one command: for every (experiment, seed), cross-entropy, SCST, the
evaluations and the record, then the two reports.

    python scripts/soft_vs_hard_sweep.py --root runs/soft_vs_hard --parallel 2 \\
        --record docs/results/flickr8k/soft_vs_hard
    python scripts/soft_vs_hard_sweep.py --root runs/soft_vs_hard --only seed=1 --only experiment=flickr8k_soft
    python scripts/soft_vs_hard_sweep.py --root runs/soft_vs_hard --dry-run        # the commands, nothing run

The grid is ``--experiments`` x ``--seeds`` (default: the four decoders, seeds 0-2), numbered as
``captioning-train -m seed=0,1,2 experiment=a,b,c,d`` numbers its jobs (seed-major: job = seed x 4 + the
experiment's place), so the folders are those of the one-sweep recipe on the results page and either way of
running fills the same sweep. Each (experiment, seed) pair is one chain, run in order:

1. cross-entropy: ``captioning-train -m seed=S experiment=E <XE recipe> hydra.sweep.dir=ROOT/xe
   hydra.sweep.subdir=N ckpt_path=auto``;
2. ``compare.py`` on that job at each decoding setting (beam 3, beam 5, beam 5 with length penalty 1, and
   the expected-context reading for a model whose attention declares it: hard attention);
3. SCST from it: ``scst_sweep.py ROOT/xe --out ROOT/scst --only seed=S --only experiment=E <SCST recipe>``;
4. ``compare.py`` on the SCST job at the same settings;
5. with ``--record DIR``: ``sweep_records.py`` of both sweeps into ``DIR/xe`` and ``DIR/scst`` (one pair at a
   time), so the captions outlive the checkpoints.

Every step is resumable (finished runs are not trained again, stopped ones resume from ``last.ckpt``,
evaluations made with the same settings are reused), so the command is run again after an interruption.
The SCST run follows its own cross-entropy run in the same chain: on a machine that is handed back with its
checkpoints, a pair started is a pair finished. ``--parallel N`` runs N chains at once (each with
``OMP_NUM_THREADS=1`` unless set). A step that fails stops its chain only; the chain is named with the end of
its log (``ROOT/logs/<experiment>-seed<S>.log``) and the exit status is 1. When every chain has ended,
``soft_vs_hard.py`` makes the report of each objective into ``DIR/report/{xe,scst}`` (or
``ROOT/report/{xe,scst}`` without ``--record``) from what exists; it needs the baseline's runs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path

from hydra.utils import get_class

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its neighbours, scripts too
from compare import pair  # noqa: E402
from scst_sweep import captioning_train, log_tail  # noqa: E402

from captioning.config import compose_config  # noqa: E402

SCRIPTS = Path(__file__).resolve().parent
EXPERIMENTS = ["flickr8k_soft", "flickr8k_hard_reinforce", "flickr8k_hard_gumbel", "flickr8k_transformer"]
# The results page's recipes: 7 epochs each, the time limit lifted so machine load cannot cut an epoch, no
# early stopping so that no run stops before its 7th; SCST as the zoo's soft SCST model was trained.
XE_RECIPE = ["trainer.max_time=00:04:00:00", "++callbacks.early_stopping=null"]
SCST_RECIPE = [
    "++callbacks.early_stopping=null",
    "model.optimizer.lr=2.0e-4",
    "model.scheduler.warmup_steps=50",
    "trainer.max_epochs=5",
]
# compare.py arguments of each decoding setting; "expected" only for attention that declares that reading
SETTINGS = [
    ["--num-beams", "3"],
    ["--num-beams", "5"],
    ["--num-beams", "5", "--decoding", "length_penalty=1"],
]
EXPECTED = ["--num-beams", "5", "--decoding", "hard_attention=expected"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, required=True, help="holds the sweeps: ROOT/xe, ROOT/scst, ROOT/logs")
    p.add_argument("--experiments", default=",".join(EXPERIMENTS), help="the grid's experiments, in order")
    p.add_argument("--seeds", default="0,1,2", help="the grid's seeds (default: %(default)s)")
    p.add_argument(
        "--only", action="append", default=[], metavar="KEY=VALUE",
        help="run only the pairs with this seed=S or experiment=E (repeatable); job numbers stay the grid's",
    )  # fmt: skip
    p.add_argument("--parallel", type=int, default=1, help="chains at once (default 1)")
    p.add_argument("--record", type=Path, help="docs folder for sweep_records.py (DIR/xe, DIR/scst)")
    p.add_argument("--data", default="flickr8k", help="the report's references (default: %(default)s)")
    p.add_argument("--dry-run", action="store_true", help="print each chain's commands, run nothing")
    args = p.parse_args(argv)
    args.experiments = [e.strip() for e in args.experiments.split(",") if e.strip()]
    try:
        args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        args.only = dict(pair(text, "--only") for text in args.only)
    except ValueError as err:
        p.error(str(err))
    if unknown := set(args.only) - {"seed", "experiment"}:
        p.error(f"--only {sorted(unknown)[0]}=...: expected seed=S or experiment=E")
    if args.parallel < 1:
        p.error(f"--parallel {args.parallel}: expected 1 or more")
    if not args.experiments or not args.seeds:
        p.error("--experiments and --seeds need at least one value each")
    return args


def reads_expected_context(experiment: str) -> bool:
    """Whether the experiment's attention layer declares the expected-context reading (hard attention)."""
    cfg, _ = compose_config("train", [f"experiment={experiment}"])
    target = cfg.model.decoder.get("attention", {}).get("_target_")
    return target is not None and "expected" in getattr(get_class(target), "inference_contexts", ())


def evaluations(sweep: Path, seed: int, experiment: str, expected: bool, scratch: Path) -> list[list[str]]:
    """compare.py on one job of ``sweep``, at every setting; tables go to ``scratch`` (the report is later)."""
    only = ["--only", f"seed={seed}", "--only", f"experiment={experiment}"]
    settings = [*SETTINGS, *([EXPECTED] if expected else [])]
    return [
        [sys.executable, str(SCRIPTS / "compare.py"), str(sweep), "--split", "val", "--allow-few-seeds",
         *only, *setting, "--out-dir", str(scratch / "-".join(setting).replace("--", ""))]
        for setting in settings
    ]  # fmt: skip


def chain(args: argparse.Namespace, experiment: str, seed: int, job: int) -> list[tuple[str, list[str]]]:
    """The (name, argv) steps of one pair, in the order they run."""
    xe, scst, scratch = (
        args.root / "xe",
        args.root / "scst",
        args.root / "tables" / f"{experiment}-seed{seed}",
    )
    expected = reads_expected_context(experiment)
    train = [*captioning_train(), "-m", f"seed={seed}", f"experiment={experiment}", *XE_RECIPE,
             f"hydra.sweep.dir={xe.resolve()}", f"hydra.sweep.subdir={job}", "ckpt_path=auto"]  # fmt: skip
    only = ["--only", f"seed={seed}", "--only", f"experiment={experiment}"]
    steps = [("cross-entropy", train)]
    steps += [
        ("evaluate cross-entropy", cmd) for cmd in evaluations(xe, seed, experiment, expected, scratch / "xe")
    ]
    steps.append(("SCST", [sys.executable, str(SCRIPTS / "scst_sweep.py"), str(xe), "--out", str(scst), *only,
                           *SCST_RECIPE]))  # fmt: skip
    steps += [
        ("evaluate SCST", cmd) for cmd in evaluations(scst, seed, experiment, expected, scratch / "scst")
    ]
    return steps


def record_steps(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    if args.record is None:
        return []
    records = [sys.executable, str(SCRIPTS / "sweep_records.py")]
    alias = f"{(args.root / 'xe').resolve()}=<xe sweep>"
    return [
        ("record cross-entropy", [*records, str(args.root / "xe"), "--out", str(args.record / "xe")]),
        ("record SCST", [*records, str(args.root / "scst"), "--out", str(args.record / "scst"), "--alias", alias]),
    ]  # fmt: skip


def report_steps(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    source = args.record or args.root
    baseline = args.experiments[0]
    return [
        (f"report {objective}", [sys.executable, str(SCRIPTS / "soft_vs_hard.py"), str(source / objective),
                                 "--data", args.data, "--baseline", baseline,
                                 "--out", str(source / "report" / objective)])
        for objective in ("xe", "scst")
    ]  # fmt: skip


def run_steps(
    steps: list[tuple[str, list[str]]], log: Path, lock: threading.Lock | None = None
) -> str | None:
    """Run the steps in order, appending their output to ``log``; the name of the step that failed, or None.
    Steps named ``record ...`` hold ``lock``: two chains never rewrite the same record at once."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    for name, argv in steps:
        with open(log, "a") as out:
            out.write(f"\n### {name}: {' '.join(argv)}\n")
            out.flush()
            with lock if (lock is not None and name.startswith("record")) else nullcontext():
                code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
        if code != 0:
            return f"{name} (exit {code})"
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    grid = [(e, s, s * len(args.experiments) + i) for s in args.seeds for i, e in enumerate(args.experiments)]
    wanted = [
        (e, s, n) for e, s, n in grid
        if args.only.get("experiment", e) == e and args.only.get("seed", str(s)) == str(s)
    ]  # fmt: skip
    if not wanted:
        raise SystemExit(f"soft_vs_hard_sweep.py: no pair of the grid has --only {args.only}")
    chains = {f"{e}-seed{s}": [*chain(args, e, s, n), *record_steps(args)] for e, s, n in wanted}
    if args.dry_run:
        for name, steps in chains.items():
            print(f"# {name}")
            for step, cmd in steps:
                print(f"{step}: {' '.join(cmd)}")
        print("# when every chain has ended")
        for step, cmd in report_steps(args):
            print(f"{step}: {' '.join(cmd)}")
        return 0
    print(f"{len(chains)} chains, {args.parallel} at a time; logs in {args.root / 'logs'}")
    lock, failed = threading.Lock(), []
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        futures = {name: pool.submit(run_steps, steps, args.root / "logs" / f"{name}.log", lock)
                   for name, steps in chains.items()}  # fmt: skip
        for name, future in futures.items():
            if (step := future.result()) is None:
                print(f"{name}: done")
            else:
                failed.append(name)
                tail = log_tail(args.root / "logs" / f"{name}.log")
                print(f"{name}: FAILED at {step}; the end of its log:\n    {tail}")
    if (report_failed := run_steps(report_steps(args), args.root / "logs" / "report.log")) is not None:
        print(f"report: FAILED at {report_failed}; see {args.root / 'logs' / 'report.log'}")
    return 1 if failed or report_failed else 0


if __name__ == "__main__":
    sys.exit(main())
