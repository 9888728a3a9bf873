"""The whole soft-vs-hard comparison as one command: for every (experiment, seed), cross-entropy, SCST, the
evaluations and the record, then the two reports.

    python scripts/soft_vs_hard_sweep.py --root runs/soft_vs_hard --parallel 2 \\
        --record docs/results/flickr8k/soft_vs_hard
    python scripts/soft_vs_hard_sweep.py --root runs/soft_vs_hard --only seed=1 --only experiment=flickr8k_soft
    python scripts/soft_vs_hard_sweep.py --root runs/soft_vs_hard --dry-run        # the commands, nothing run

The grid is ``--experiments`` x ``--seeds`` (default: the four decoders, seeds 0-2). Pair (E, S) is job
``S x len(experiments) + E's place``, the number ``captioning-train -m seed=0,1,2 experiment=a,b,c,d`` gives
it (seed-major, seeds counted from 0 whatever ``--seeds`` holds: ``--seeds 1,2`` keeps seed 1 at the
numbers of the whole grid), so either way of running fills the same sweep. A job folder that already holds another
pair (another grid on the same root) is refused, never trained over. Each pair is one chain, run in order:

1. cross-entropy: ``captioning-train -m seed=S experiment=E <XE recipe> hydra.sweep.dir=ROOT/xe
   hydra.sweep.subdir=N ckpt_path=auto`` (not launched when job N has finished: launching it again would
   rewrite its ``.hydra/`` with the overrides of this call);
2. ``compare.py`` on that job at each decoding setting (beam 3, beam 5, beam 5 with length penalty 1, and
   the expected-context reading when the experiment's attention layer declares it: hard attention);
3. with ``--record DIR``: ``sweep_records.py ROOT/xe --out DIR/xe`` (every job the machine has, unfinished
   ones marked so; one writer at a time, across processes), so the captions outlive the checkpoints and the
   cross-entropy run is kept even if its SCST fails;
4. SCST from it: ``scst_sweep.py ROOT/xe --out ROOT/scst --only seed=S --only experiment=E <SCST recipe>``;
5. ``compare.py`` on the SCST job at the same settings;
6. with ``--record DIR``: ``sweep_records.py ROOT/scst --out DIR/scst``.

When every chain has ended, both records are written once more (a chain that failed leaves its jobs there,
marked unfinished, never dropped), then the reports.

Every step resumes (finished runs are not trained again, stopped ones resume from ``last.ckpt``, evaluations
made with the same settings are reused), so the command is run again after an interruption; with
``--record``, a pair whose record already holds both runs at every setting is skipped (``--force`` runs it
again), so a new machine without the checkpoints does not retrain what is recorded. The SCST run follows its
own cross-entropy run in the same chain: on a machine that is handed back with its checkpoints, a pair
started is a pair finished. ``--parallel N`` runs N chains at once (``OMP_NUM_THREADS=1`` each unless set);
a pair another process is running (its lock, or its job folder's, is held) is left to it, not counted as
a failure. A failing step stops its own chain only; the chain is named
with the end of its log (``ROOT/logs/<experiment>-seed<S>.log``) and the exit status is 1. At the end
``soft_vs_hard.py`` reports each objective into ``DIR/report/{xe,scst}`` (``ROOT/report`` without
``--record``) once the baseline and one other experiment have finished runs there.

The recipes are the Flickr8k comparison's; ``--xe KEY=VALUE`` and ``--scst KEY=VALUE`` replace or add to
them (the same key keeps one value, the one given), so the same command runs another comparison, e.g. on
COCO with its experiments and SCST recipe (``docs/guides/coco.md``)::

    python scripts/soft_vs_hard_sweep.py --root runs/coco_svh \
        --experiments coco_soft,coco_hard_reinforce,coco_hard_gumbel,coco_transformer \
        --xe trainer.max_time=null --scst model.optimizer.lr=5.7e-5 --scst trainer.max_epochs=10

``--xe`` overrides that say where the data is (``data.*``, ``paths.*``) also go to the reports, whose
references must be the same captions.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from functools import cache
from pathlib import Path
from types import SimpleNamespace

import yaml
from hydra.errors import HydraException
from hydra.utils import get_class
from omegaconf import DictConfig

from captioning.compose import compose_config
from experiments.compare import setting_name
from experiments.scst_sweep import captioning_train, log_tail
from experiments.step_chain import file_lock, run_steps
from experiments.sweep_jobs import (
    describe_only,
    find_jobs,
    finished_summary,
    only_filter,
    override_problem,
    parse_override,
    with_overrides,
)

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
# (beam size, decoding options) of each evaluation; EXPECTED only for attention that declares that reading
SETTINGS = [(3, {}), (5, {}), (5, {"length_penalty": 1})]
EXPECTED = (5, {"hard_attention": "expected"})
SPLIT = "val"
PAIR_KEYS = ("seed", "experiment")  # what makes a pair: set by the grid, never by --xe / --scst


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, required=True, help="holds the sweeps: ROOT/xe, ROOT/scst, ROOT/logs")
    p.add_argument("--experiments", default=",".join(EXPERIMENTS), help="the grid's experiments, in order")
    p.add_argument("--seeds", default="0,1,2", help="the grid's seeds (default: %(default)s)")
    p.add_argument(
        "--only", action="append", default=[], metavar="KEY=VALUE",
        help="run only the pairs with seed=S / experiment=E (repeatable: a key given twice accepts either)",
    )  # fmt: skip
    p.add_argument(
        "--baseline", help="the reports' baseline experiment (default: the first of --experiments)"
    )
    p.add_argument("--parallel", type=int, default=1, help="chains at once (default 1)")
    p.add_argument("--record", type=Path, help="docs folder for sweep_records.py (DIR/xe, DIR/scst)")
    p.add_argument("--force", action="store_true", help="run pairs whose record is complete too")
    p.add_argument(
        "--xe", action="append", default=[], metavar="KEY=VALUE",
        help="a Hydra override of every cross-entropy run (repeatable), replacing the recipe's value of the same "
        "key; the SCST runs keep it (they start from their job's overrides), and data.* / paths.* ones also "
        "reach the reports' references, e.g. --xe trainer.max_time=null --xe paths.val_json=my/val.json",
    )  # fmt: skip
    p.add_argument(
        "--scst", action="append", default=[], metavar="KEY=VALUE",
        help="a Hydra override of the shared SCST recipe (repeatable), replacing its value of the same key, "
        "e.g. --scst model.optimizer.lr=5.7e-5 --scst trainer.max_epochs=10",
    )  # fmt: skip
    p.add_argument(
        "--data",
        help="the reports' references, a data config (default: the one the baseline experiment trains on)",
    )
    p.add_argument("--dry-run", action="store_true", help="print each chain's commands, run nothing")
    args = p.parse_args(argv)
    args.experiments = [e.strip() for e in args.experiments.split(",") if e.strip()]
    try:
        args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        args.only = only_filter(args.only)
    except ValueError as err:
        p.error(str(err))
    for flag in ("xe", "scst"):
        for text in getattr(args, flag):
            if why := override_problem(text, reserved=PAIR_KEYS, per="pair"):
                p.error(f"--{flag} {text!r}: {why}")
    if unknown := set(args.only) - {"seed", "experiment"}:
        p.error(f"--only {sorted(unknown)[0]}=...: expected seed=S or experiment=E")
    if args.parallel < 1:
        p.error(f"--parallel {args.parallel}: expected 1 or more")
    if not args.experiments or not args.seeds or min(args.seeds) < 0:
        p.error("--experiments and --seeds need at least one value each (seeds 0 or more)")
    args.baseline = args.baseline or args.experiments[0]
    try:
        for experiment in {*args.experiments, args.baseline}:  # each known, before anything runs
            composed(experiment)
    except ValueError as err:
        p.error(str(err))
    if args.data is None:  # the data the runs train on: an --xe data=NAME, else the baseline experiment's
        data = [value for key, value in map(parse_override, args.xe) if key == "data"]
        args.data = data[-1] if data else composed(args.baseline)[1]["data"]
    return args


@cache  # a Hydra compose per experiment, not one per evaluation list (each pair asks two or three times)
def composed(experiment: str) -> tuple[DictConfig, dict[str, str]]:
    """The experiment's training config and its config groups' choices; an unknown name is one clear line."""
    try:
        return compose_config("train", [f"experiment={experiment}"])
    except HydraException as err:
        raise ValueError(f"experiment={experiment}: {str(err).splitlines()[0]}") from None


def reads_expected_context(experiment: str) -> bool:
    """Whether the experiment's attention layer declares the expected-context reading (hard attention)."""
    cfg, _ = composed(experiment)
    target = cfg.model.decoder.get("attention", {}).get("_target_")
    return target is not None and "expected" in getattr(get_class(target), "inference_contexts", ())


def settings(experiment: str) -> list[tuple[int, dict]]:
    return [*SETTINGS, *([EXPECTED] if reads_expected_context(experiment) else [])]


def setting_folder(beams: int, decoding: dict) -> str:
    """The JOB/compare/ folder compare.py writes for this evaluation."""
    return setting_name(SimpleNamespace(split=SPLIT, num_beams=beams, decoding=decoding))


def pair_only(seed: int, experiment: str) -> list[str]:
    """The ``--only`` flags that select one pair's job in compare.py and scst_sweep.py."""
    return ["--only", f"seed={seed}", "--only", f"experiment={experiment}"]


def evaluations(sweep: Path, seed: int, experiment: str, scratch: Path) -> list[list[str]]:
    """compare.py on one job of ``sweep``, at every setting; tables go to ``scratch`` (the report is later)."""
    only = pair_only(seed, experiment)
    return [
        [sys.executable, str(SCRIPTS / "compare.py"), str(sweep), "--split", SPLIT, "--allow-few-seeds", *only,
         "--num-beams", str(beams), *(a for k, v in decoding.items() for a in ("--decoding", f"{k}={v}")),
         "--out-dir", str(scratch / setting_folder(beams, decoding))]
        for beams, decoding in settings(experiment)
    ]  # fmt: skip


def reference_overrides(args: argparse.Namespace) -> list[str]:
    """The ``--xe`` overrides that say where the data is: the reports' references must be the same."""
    return [o for o in args.xe if parse_override(o)[0].startswith(("data.", "paths."))]


def chain(args: argparse.Namespace, experiment: str, seed: int, job: int) -> list[tuple[str, list[str]]]:
    """The (name, argv) steps of one pair, in the order they run."""
    xe, scst, scratch = (
        args.root / "xe",
        args.root / "scst",
        args.root / "tables" / f"{experiment}-seed{seed}",
    )
    train = [*captioning_train(), "-m", f"seed={seed}", f"experiment={experiment}", *with_overrides(XE_RECIPE, args.xe),
             f"hydra.sweep.dir={xe.resolve()}", f"hydra.sweep.subdir={job}", "ckpt_path=auto"]  # fmt: skip
    only = pair_only(seed, experiment)
    finished = finished_summary(xe / str(job) / "run.json") is not None
    steps = [] if finished else [("cross-entropy", train)]
    steps += [("evaluate cross-entropy", cmd) for cmd in evaluations(xe, seed, experiment, scratch / "xe")]
    steps += record_steps(args)[:1]  # the cross-entropy run is kept even if its SCST fails
    steps.append(("SCST", [sys.executable, str(SCRIPTS / "scst_sweep.py"), str(xe), "--out", str(scst), *only,
                           *with_overrides(SCST_RECIPE, args.scst)]))  # fmt: skip
    steps += [("evaluate SCST", cmd) for cmd in evaluations(scst, seed, experiment, scratch / "scst")]
    return steps + record_steps(args)[1:]


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
    return [
        (f"report {objective}", [sys.executable, str(SCRIPTS / "soft_vs_hard.py"), str(source / objective),
                                 *reference_overrides(args), "--data", args.data, "--baseline", args.baseline,
                                 "--out", str(source / "report" / objective)])
        for objective in ("xe", "scst")
    ]  # fmt: skip


def not_reportable(sweep: Path, baseline: str) -> str | None:
    """Why ``sweep`` cannot be reported yet (no finished baseline run, or nothing beside it), else None."""
    finished = (
        {j["overrides"].get("experiment") for j in find_jobs(sweep) if j["summary"]}
        if sweep.is_dir()
        else set()
    )
    if baseline not in finished:
        return f"no finished {baseline} run in {sweep}"
    if len(finished) < 2:
        return f"only {baseline} has finished runs in {sweep}: nothing to compare with"
    return None


def pair_conflict(args: argparse.Namespace, experiment: str, seed: int, job: int) -> str | None:
    """Another pair's run in the job's folders (a grid of other experiments or seeds on this root, or in the
    record), else None: never trained over, never taken for this pair's record."""
    sweeps = [args.root / "xe", args.root / "scst"]
    sweeps += [args.record / "xe", args.record / "scst"] if args.record is not None else []
    for overrides_file in (sweep / str(job) / ".hydra" / "overrides.yaml" for sweep in sweeps):
        if not overrides_file.is_file():
            continue
        have = dict(parse_override(str(o)) for o in yaml.safe_load(overrides_file.read_text()) or [])
        if have.get("seed") != str(seed) or have.get("experiment") != experiment:
            return (
                f"{overrides_file.parent.parent} holds seed={have.get('seed')} experiment={have.get('experiment')}, "
                f"not seed={seed} experiment={experiment}: another grid used this folder (keep --experiments and "
                "--seeds as they were, or use another --root / --record)"
            )
    return None


def recorded(args: argparse.Namespace, experiment: str, job: int) -> bool:
    """Whether ``--record`` already holds both runs of the pair, each at every evaluation setting."""
    if args.record is None:
        return False
    folders = {setting_folder(*s) for s in settings(experiment)}
    for objective in ("xe", "scst"):
        run = args.record / objective / str(job)
        done = {p.name for p in (run / "compare").glob("*") if (p / "results.json").is_file()}
        if finished_summary(run / "run.json") is None or not folders <= done:
            return False
    return True


HELD = "held"  # run_chain's answer for a pair (or its job folder) another process is running


def run_chain(
    args: argparse.Namespace, name: str, pair: tuple[str, int, int], steps: list[tuple[str, list[str]]]
) -> str | None:
    """One pair's chain under its lock and its job folder's (a grid of other experiments on this root
    numbers other pairs into the same folders); ``HELD`` when another process holds either, the failed
    step, or None. The folder is checked again under the locks: another grid may have started in it since."""
    experiment, seed, job = pair
    locks = args.root / "locks"
    with (
        file_lock(locks / f"{name}.lock", wait=False) as mine,
        file_lock(locks / f"job-{job}.lock", wait=False) as folder,
    ):
        if not (mine and folder):
            return HELD
        if conflict := pair_conflict(args, experiment, seed, job):
            return f"the start (refused: {conflict})"
        return run_steps(steps, args.root / "logs" / f"{name}.log", locks / "records.lock")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    grid = [(e, s, s * len(args.experiments) + i) for s in args.seeds for i, e in enumerate(args.experiments)]
    wanted = [
        (e, s, n) for e, s, n in grid
        if e in args.only.get("experiment", {e}) and str(s) in args.only.get("seed", {str(s)})
    ]  # fmt: skip
    if not wanted:
        raise SystemExit(f"soft_vs_hard_sweep.py: no pair of the grid has {describe_only(args.only)}")
    problems, chains = {}, {}
    for e, s, n in wanted:
        name = f"{e}-seed{s}"
        if conflict := pair_conflict(args, e, s, n):
            problems[name] = conflict
        elif not args.force and recorded(args, e, n):
            print(
                f"{name}: recorded in {args.record} at every setting (job {n}): skipped; --force runs it again"
            )
        else:
            chains[name] = ((e, s, n), chain(args, e, s, n))
    for name, conflict in problems.items():
        print(f"{name}: REFUSED: {conflict}")
    if args.dry_run:
        for name, (_, steps) in chains.items():
            print(f"# {name}")
            for step, cmd in steps:
                print(f"{step}: {shlex.join(cmd)}")
        print("# when every chain has ended")
        for step, cmd in report_steps(args):
            print(f"{step}: {shlex.join(cmd)}")
        return 1 if problems else 0
    print(f"{len(chains)} chains, {args.parallel} at a time; logs in {args.root / 'logs'}")
    failed = list(problems)
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        futures = {pool.submit(run_chain, args, name, *chain_): name for name, chain_ in chains.items()}
        for future in as_completed(futures):  # said as each chain ends, not in the order they were started
            name = futures[future]
            if (step := future.result()) is None:
                print(f"{name}: done")
            elif step == HELD:
                print(f"{name}: left to the process that holds its lock (it is running there)")
            else:
                failed.append(name)
                tail = log_tail(args.root / "logs" / f"{name}.log")
                print(f"{name}: FAILED at {step}; the end of its log:\n    {tail}")
    # the record again, every job as it stands now: a chain that failed keeps what it finished
    bad = run_steps(
        record_steps(args) if chains else [],
        args.root / "logs" / "record.log",
        args.root / "locks" / "records.lock",
    )
    if bad is not None:
        failed.append(bad)
        print(f"record: FAILED at {bad}; see {args.root / 'logs' / 'record.log'}")
    for step, cmd in report_steps(args):
        if why := not_reportable(Path(cmd[2]), args.baseline):
            print(f"{step}: not made yet: {why}")
        elif (
            bad := run_steps(
                [(step, cmd)], args.root / "logs" / "report.log", args.root / "locks" / "records.lock"
            )
        ) is not None:
            failed.append(step)
            print(f"{step}: FAILED ({bad}); see {args.root / 'logs' / 'report.log'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
