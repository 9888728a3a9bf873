"""What ``scripts/compare.py`` writes about a sweep: the mean ± std table (``comparison.md``) and the bar chart
with every seed as a dot (``comparison.png``), from the rows the evaluations left; ``replot`` redraws the
chart from a ``results.json`` alone. Reads rows, evaluates nothing (the evaluating half is compare.py).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt
import numpy as np

from experiments.sweep_jobs import SEED_KEY

COLUMNS = {  # row key -> column title
    "Bleu_1": "BLEU-1",
    "Bleu_2": "BLEU-2",
    "Bleu_3": "BLEU-3",
    "Bleu_4": "BLEU-4",
    "METEOR": "METEOR",
    "ROUGE_L": "ROUGE-L",
    "CIDEr": "CIDEr-D",
    "objects": "objects right",
    "extra": "extra / image",
    "grounding": "grounding",
    "objects_alt": "objects right (alt)",
    "grounding_alt": "grounding (alt)",
}


def summarise(rows: list[dict], labels: list[str]) -> dict[str, dict[str, tuple[float, float]]]:
    """label -> column -> (mean, sample std); std is 0 for a single run, NaN values are left out."""
    summary: dict[str, dict[str, tuple[float, float]]] = {}
    for label in labels:
        runs = [r for r in rows if r["label"] == label]
        summary[label] = {}
        for key in [*COLUMNS, "train_seconds", "params"]:
            values = np.array([r[key] for r in runs if r.get(key) is not None], dtype=float)
            values = values[~np.isnan(values)]
            if len(values):
                std = float(values.std(ddof=1)) if len(values) > 1 else 0.0
                summary[label][key] = (float(values.mean()), std)
    return summary


def present_columns(rows: list[dict]) -> list[str]:
    """The metric columns some run has (grounding only on synthetic scenes, only requested metrics)."""
    return [k for k in COLUMNS if any(r.get(k) is not None for r in rows)]


def markdown(rows: list[dict], summary: dict, args: argparse.Namespace) -> str:
    columns = present_columns(rows)
    first = rows[0]
    lines = [
        "# Decoder comparison",
        "",
        f"{len(rows)} runs of the sweep {args.sweep_name}: {len(summary)} configurations "
        f"({', '.join(k for k in args.swept if k != SEED_KEY) or 'one'}) x seeds {args.seeds}; evaluated on "
        f"{first['num_images']} images of the {args.split} split, beam {first['decoding']['num_beams']}, "
        + "".join(f"{k} {v}, " for k, v in args.decoding.items())
        + f"max new tokens {first['decoding']['max_new_tokens']}, {first['tokenizer']} tokenizer. Scores are "
        "pycocoevalcap's on the 0-1 scale (papers print x100); mean ± sample std over seeds.",
    ]
    if "grounding" in columns:
        lines.append(
            "grounding: fraction of generated object words whose attention peak is inside the named object. "
            "objects right: fraction of scene objects named with size, colour, shape and position all right "
            "(order-free); extra / image: named objects the scene does not have."
            + (
                f" (alt): the same on {args.alt_scenes} scenes of tests/alt_renderer.py, a renderer written "
                "apart from the project's."
                if "objects_alt" in columns
                else ""
            )
        )
    if first["skipped"]:
        lines.append("Not computed: " + "; ".join(f"{m}: {why}" for m, why in first["skipped"].items()))
    if args.common:
        lines.append(f"Overrides of every job: `{' '.join(args.common)}`")
    if args.jobs > 1:
        lines.append(
            f"{args.jobs} runs trained at once by {args.launcher} (train times are under that load)."
        )
    if args.skipped_jobs:
        lines.append(f"Left out (not finished: no finished run.json): {', '.join(args.skipped_jobs)}")
    header = ["configuration", "runs", *[COLUMNS[c] for c in columns], "train time (min)", "trainable params"]
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, stats in summary.items():
        n = sum(r["label"] == label for r in rows)
        cells = [label, str(n)]
        cells += [f"{stats[c][0]:.4f} ± {stats[c][1]:.4f}" if c in stats else "n/a" for c in columns]
        minutes = stats.get("train_seconds", (math.nan, math.nan))
        params = stats.get("params", (math.nan, 0.0))[0]
        cells += [
            f"{minutes[0] / 60:.1f} ± {minutes[1] / 60:.1f}",
            f"{params:,.0f}" if params == params else "n/a",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Per run:",
        "",
        "| configuration | seed | job | BLEU-4 | CIDEr-D | train time (min) | checkpoint |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        minutes = r["train_seconds"] / 60 if r.get("train_seconds") is not None else math.nan
        lines.append(
            f"| {r['label']} | {r['seed']} | {r['job']} | {r.get('Bleu_4', math.nan):.4f} | "
            f"{r.get('CIDEr', math.nan):.4f} | {minutes:.1f} | {r['checkpoint']} |"
        )
    return "\n".join(lines) + "\n"


def bar_chart(summary: dict, rows: list[dict], columns: list[str], path: Path, title: str) -> None:
    """Grouped bars (mean ± std over seeds) with every seed as a dot: the 0-1 metrics on the left axis,
    CIDEr-D (0-10 scale) on its own axis on the right, so neither flattens the other."""
    labels = list(summary)
    unit = [c for c in columns if c != "CIDEr"]
    panels = (
        [(unit, "score (0-1 scale)"), (["CIDEr"], "CIDEr-D")]
        if "CIDEr" in columns
        else [(unit, "score (0-1)")]
    )
    widths = [len(cols) for cols, _ in panels]
    fig, axes = plt.subplots(1, len(panels), figsize=(1.3 * sum(widths) + 3, 4.5), squeeze=False,
                             gridspec_kw={"width_ratios": widths})  # fmt: skip
    width = 0.8 / len(labels)
    for ax, (cols, ylabel) in zip(axes[0], panels):
        x = np.arange(len(cols))
        for i, label in enumerate(labels):
            offset = x + (i - (len(labels) - 1) / 2) * width
            means = [summary[label].get(c, (np.nan, 0.0))[0] for c in cols]
            stds = [summary[label].get(c, (np.nan, 0.0))[1] for c in cols]
            ax.bar(offset, means, width, yerr=stds, capsize=3, label=label, alpha=0.85)
            for j, c in enumerate(cols):  # every seed as a dot over its bar
                seeds = [r[c] for r in rows if r["label"] == label and r.get(c) is not None]
                ax.plot(np.full(len(seeds), offset[j]), seeds, "k.", ms=4)
        ax.set_xticks(x, [COLUMNS[c] for c in cols], rotation=20)
        ax.set_ylabel(f"{ylabel}; bars: mean ± std, dots: seeds")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def replot(results: Path) -> Path:
    """Redraw ``comparison.png`` beside ``results``, from its rows alone (no evaluation)."""
    rows = json.loads(results.read_text())
    labels = list(dict.fromkeys(r["label"] for r in rows))
    first, seeds = rows[0], sorted({r["seed"] for r in rows})
    title = f"beam {first['decoding'].get('num_beams', first['decoding'].get('beam_size'))}, {len(seeds)} seeds per configuration"
    out = results.with_name("comparison.png")
    bar_chart(summarise(rows, labels), rows, present_columns(rows), out, title)
    return out
