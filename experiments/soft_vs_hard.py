"""Soft against hard attention, reported so a reviewer can judge it: seeds, halves, bootstrap intervals.

    python scripts/soft_vs_hard.py outputs/compare/flickr8k_scratch --data flickr8k \\
        --baseline flickr8k_soft --out docs/results/flickr8k/soft_vs_hard

Reads the captions of every run a sweep aggregated by ``scripts/compare.py`` left (one caption per dev
image: ``JOB/compare/<split>-beam<k>/results.json`` with the job's label and seed in row.json beside it; or
the older ``RUNS/runs/<label>-seed<k>/results.json``), scores every run against the split's references,
and writes
``report.md``, ``report.json``, ``seeds.png`` and ``summary.md`` (the held-out reading at a glance, for a
docs page to include; the pages: ``soft_vs_hard_pages.py``) to ``--out``:
- per configuration: BLEU-4 (with and without the brevity penalty: coco-caption applies it, Xu et al.'s
  BLEU did not) and CIDEr-D, mean ± sample std over seeds with the 95% t interval of the mean,
  on the whole split and on its two halves (even / odd positions of the sorted image ids), so a decoding
  choice made on one half can be reported on the other;
- per configuration against the baseline: the paired bootstrap interval of the difference (images resampled,
  seeds pooled per image: captioning.metrics.bootstrap); where both sides have two or more seeds, the
  approximate one that resamples each side's seeds too and the Welch t interval of the seeds' means (would
  the recipes differ if trained again, not only these models on other images); and the fraction of (seed,
  baseline seed) pairs in which the configuration scores higher;
- a run directory without results.json is listed as failed or unfinished, never dropped silently.

One decoding for every model, chosen on one half: when the jobs were evaluated at several settings
(``compare.py --num-beams 3`` / ``5``, ``--decoding length_penalty=0.5``, ...: one ``JOB/compare/<setting>/``
each), the setting with the highest mean CIDEr-D over *all* runs on the even half is chosen (``--setting``
names one instead) and the report is made at it; the odd half is the held-out reading. A setting only some
configurations have (``compare.py --only experiment=flickr8k_hard_reinforce --decoding hard_attention=expected``)
is reported as an extra configuration, ``<label> @ <setting>``, against the baseline at the chosen setting.
"""

from __future__ import annotations

import argparse
import json
import sys
from itertools import product
from pathlib import Path

import numpy as np

from captioning.compose import compose_config
from captioning.inference.evaluation import build_source
from captioning.metrics.bootstrap import (
    ImageStats,
    image_stats,
    mean_ci,
    paired_bootstrap,
    pooled,
    seed_image_bootstrap,
    welch_interval,
)
from captioning.metrics.coco import tokenize_captions
from experiments.soft_vs_hard_pages import METRICS, chart, markdown, summary_table
from experiments.sweep_jobs import SEED_KEY, find_jobs, job_label, job_seed, natural_key, swept_keys


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "runs", type=Path, help="a sweep folder aggregated by scripts/compare.py (or an older runs/ folder)"
    )
    p.add_argument("--data", default="flickr8k", help="data config of the references (default: %(default)s)")
    p.add_argument("--split", default="val", choices=("val", "test"))
    p.add_argument("--baseline", default="flickr8k_soft", help="the label the others are compared with")
    p.add_argument("--tokenizer", default="ptb", choices=("ptb", "simple"))
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (default: %(default)s)")
    p.add_argument(
        "--setting", default=None, help="report at this JOB/compare/ setting instead of choosing one"
    )
    p.add_argument("--out", type=Path, required=True, help="folder for report.md, report.json, seeds.png")
    p.add_argument(
        "overrides", nargs="*", help="Hydra overrides for the data config, e.g. data.val.num_images=50"
    )
    return p.parse_intermixed_args(argv)


def find_runs(root: Path) -> tuple[dict[str, dict[int, dict[str, Path]]], list[str]]:
    """label -> seed -> setting -> results.json (one caption per image), and the runs that have none.

    Two layouts: a sweep aggregated by ``scripts/compare.py`` (``JOB/compare/<split>-beam<k>/results.json``,
    row.json beside it; a job folder with ``.hydra/`` but no row.json is unfinished) and the older
    ``runs/<label>-seed<k>/results.json``. A job is labelled as compare.py groups the sweep *now* (its
    ``.hydra/overrides.yaml``): the label row.json stored is the grouping of the sweep it was first
    evaluated in, which may have held fewer jobs; row.json's own label serves a job without overrides."""
    runs: dict[str, dict[int, dict[str, Path]]] = {}
    missing: list[str] = []
    if not root.is_dir():
        raise SystemExit(f"error: {root} is not a folder: expected a sweep or a comparison folder")
    jobs = find_jobs(root)
    group_keys = [k for k in swept_keys(jobs) if k != SEED_KEY]
    now = {job["dir"]: (job_label(job, group_keys), job_seed(job)) for job in jobs}
    source: dict[tuple[str, int], Path] = {}  # (label, seed) -> the job folder it was read from
    for row_file in sorted(root.rglob("compare/*/row.json")):
        row = json.loads(row_file.read_text())
        results = row_file.with_name("results.json")
        if results.is_file():
            job_dir = row_file.parent.parent.parent.resolve()
            label, seed = now.get(job_dir, (row["label"], row["seed"]))
            first = source.setdefault((str(label), int(seed)), job_dir)
            if first != job_dir:
                raise SystemExit(
                    f"error: {first.name} and {job_dir.name} under {root} are both {label} seed {seed}: one run "
                    "per configuration and seed (move one away, or give it another seed)"
                )
            seeds = runs.setdefault(str(label), {})
            seeds.setdefault(int(seed), {})[row_file.parent.name] = results
    if runs:
        evaluated = {p.parent.parent.parent for p in root.rglob("compare/*/row.json")}
        missing = sorted(
            (str(j.parent.relative_to(root)) for j in root.rglob(".hydra") if j.parent not in evaluated),
            key=natural_key,
        )
        return runs, missing
    folder = root / "runs"
    if not folder.is_dir():
        raise SystemExit(
            f"error: no compare/*/row.json under {root} and no {folder}: run scripts/compare.py first"
        )
    for run in sorted(folder.iterdir()):
        label, sep, seed = run.name.rpartition("-seed")
        if not sep or not seed.isdigit():
            continue
        results = run / "results.json"
        if results.is_file():
            runs.setdefault(label, {})[int(seed)] = {"runs": results}
        else:
            missing.append(run.name)
    return runs, missing


def references(data: str, split: str, overrides: list[str]) -> dict:
    cfg, _ = compose_config("eval", [f"data={data}", *overrides])
    source = build_source(cfg.data, split)
    return {source.image_id(i): list(source.captions(i)) for i in range(len(source))}


def halves(ids: tuple) -> dict[str, np.ndarray]:
    """Row indices of the whole split and of its even / odd halves by sorted image id."""
    order = sorted(range(len(ids)), key=lambda k: str(ids[k]))
    return {"all": np.arange(len(ids)), "even": np.array(order[0::2]), "odd": np.array(order[1::2])}


class RunStats:
    """``stats(path)``: a results.json's per-image statistics against one split's references (a missing
    image: ""). The references are tokenised once and every file once, so the runs a decoding was chosen on
    are not tokenised again for the report."""

    def __init__(self, refs: dict, tokenizer: str):
        self.tokenizer = tokenizer
        self.refs_tok = tokenize_captions(refs, tokenizer)
        self._done: dict[Path, ImageStats] = {}

    def __call__(self, path: Path) -> ImageStats:
        if path not in self._done:
            captions = {r["image_id"]: r["caption"] for r in json.loads(path.read_text())}
            # ids are ints in the results file and may be ints or strings in the source: match as text
            by_text = {str(k): v for k, v in captions.items()}
            hyps = {k: [by_text.get(str(k), "")] for k in self.refs_tok}
            hyps_tok = {k: v[0] for k, v in tokenize_captions(hyps, self.tokenizer).items()}
            self._done[path] = image_stats(self.refs_tok, hyps_tok)
        return self._done[path]


def choose_setting(runs: dict, stats_of: RunStats, forced: str | None) -> tuple[str, dict]:
    """The setting every run has with the best mean CIDEr-D over all runs on the even half (or ``forced``),
    and every candidate's even-half means."""
    common = set.intersection(*(set(by) for seeds in runs.values() for by in seeds.values()))
    if forced is not None:
        if forced not in common:
            raise SystemExit(
                f"error: --setting {forced!r} is not evaluated for every run; have: {sorted(common)}"
            )
        return forced, {}
    if not common:
        raise SystemExit(
            "error: no evaluation setting is shared by every run (run compare.py at one setting)"
        )
    if len(common) == 1:
        return next(iter(common)), {}
    candidates = {}
    for setting in sorted(common):
        stats = [stats_of(by[setting]) for seeds in runs.values() for by in seeds.values()]
        even = halves(stats[0].ids)["even"]
        scores = [score(s.take(even)) for s in stats]
        candidates[setting] = {m: float(np.mean([x[m] for x in scores])) for m in ("CIDEr", "Bleu_4")}
    return max(candidates, key=lambda k: candidates[k]["CIDEr"]), candidates


def at_setting(runs: dict, chosen: str) -> dict[str, dict[int, Path]]:
    """label -> seed -> results.json at the chosen setting, plus ``<label> @ <setting>`` for each setting
    that only some configurations have (on every one of their seeds)."""
    out = {label: {seed: by[chosen] for seed, by in seeds.items()} for label, seeds in runs.items()}
    for label, seeds in runs.items():
        extra = set.intersection(*(set(by) for by in seeds.values())) - {chosen}
        for setting in sorted(extra):
            if not all(setting in by for s in runs.values() for by in s.values()):
                out[f"{label} @ {setting}"] = {seed: by[setting] for seed, by in seeds.items()}
    return out


def score(stats: ImageStats) -> dict[str, float]:
    return {
        "Bleu_4": stats.bleu4(),
        "Bleu_4_nobp": stats.bleu4(brevity=False),
        "CIDEr": float(stats.cider.mean()),
        "length_ratio": stats.length_ratio(),
    }


def analyse(runs: dict[str, dict[int, Path]], stats_of: RunStats, baseline: str, resamples: int) -> dict:
    if baseline not in runs:
        raise SystemExit(f"error: --baseline {baseline!r} has no finished run; labels: {sorted(runs)}")
    stats = {
        label: {seed: stats_of(path) for seed, path in sorted(seeds.items())} for label, seeds in runs.items()
    }
    parts = halves(next(iter(stats[baseline].values())).ids)
    # the baseline's per-seed scores and its seeds pooled, once per part (every configuration meets them)
    base_scores = {
        p: {seed: score(s.take(rows)) for seed, s in stats[baseline].items()} for p, rows in parts.items()
    }
    base_runs = {p: [s.take(rows) for s in stats[baseline].values()] for p, rows in parts.items()}
    base_pooled = {p: pooled(runs_here) for p, runs_here in base_runs.items()}
    report: dict = {
        "baseline": baseline, "tokenizer": stats_of.tokenizer, "images": len(stats_of.refs_tok), "configs": {}
    }  # fmt: skip
    for label, seeds in stats.items():
        entry: dict = {"seeds": sorted(seeds), "per_seed": {}, "summary": {}, "vs_baseline": {}}
        for part, rows in parts.items():
            scores = {seed: score(s.take(rows)) for seed, s in seeds.items()}
            entry["per_seed"][part] = scores
            entry["summary"][part] = {
                m: dict(zip(("mean", "std", "ci95"), mean_ci([v[m] for v in scores.values()])))
                for m in METRICS
            }
            if label == baseline:
                continue
            runs_here = [s.take(rows) for s in seeds.values()]
            diffs = paired_bootstrap(
                base_pooled[part], pooled(runs_here), resamples=resamples, metrics=tuple(METRICS)
            )
            # the seeds' spread too, where both sides have one to resample (a single seed has none)
            both = len(runs_here) > 1 and len(stats[baseline]) > 1
            seeds_too = (
                seed_image_bootstrap(base_runs[part], runs_here, resamples=resamples, metrics=tuple(METRICS))
                if both
                else {}
            )
            base = base_scores[part]
            wins = {
                m: float(np.mean([scores[i][m] > base[j][m] for i, j in product(scores, base)]))
                for m in METRICS
            }
            welch = {
                m: welch_interval([v[m] for v in base.values()], [v[m] for v in scores.values()])
                for m in METRICS
            }
            entry["vs_baseline"][part] = {
                m: {
                    **vars(d), "significant": d.significant, "seed_pair_wins": wins[m],
                    "seeds_too": interval_entry(seeds_too[m].low, seeds_too[m].high) if m in seeds_too else None,
                    # the seeds' own scores only: their means' difference and its Welch t interval
                    "seed_means_t": interval_entry(*welch[m][1:], delta=welch[m][0]) if welch[m] else None,
                }
                for m, d in diffs.items()
            }  # fmt: skip
        report["configs"][label] = entry
    return report


def interval_entry(low: float, high: float, **more: float) -> dict:
    """A seed-level interval as the report stores it; significant as ``Difference.significant``: it
    excludes 0."""
    return {**more, "low": low, "high": high, "significant": low > 0 or high < 0}


def shown(argv: list[str]) -> list[str]:
    """The command's words as the report prints them: a path under the working folder relative to it (also
    after ``key=``), so a report made with absolute paths names no machine's folders."""
    here = Path.cwd()

    def one(word: str) -> str:
        key, sep, value = word.rpartition("=") if "=" in word and not word.startswith("/") else ("", "", word)
        path = Path(value)
        if path.is_absolute() and path.is_relative_to(here):
            value = path.relative_to(here).as_posix() or "."
        return f"{key}{sep}{value}"

    return [one(word) for word in argv]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs, missing = find_runs(args.runs)
    if not runs:
        raise SystemExit(f"error: no finished run (results.json) under {args.runs / 'runs'}")
    refs = references(args.data, args.split, args.overrides)
    stats_of = RunStats(refs, args.tokenizer)
    chosen, candidates = choose_setting(runs, stats_of, args.setting)
    report = analyse(at_setting(runs, chosen), stats_of, args.baseline, args.resamples)
    report["setting"] = {
        "chosen": chosen,
        "chosen_on": "even" if candidates else None,
        "candidates": candidates,
    }
    report["failed_or_unfinished"] = missing
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python scripts/soft_vs_hard.py " + " ".join(shown(argv if argv is not None else sys.argv[1:]))
    (args.out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / "report.md").write_text(markdown(report, missing, command))
    (args.out / "summary.md").write_text(summary_table(report))
    chart(report, args.out / "seeds.png")
    print((args.out / "report.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
