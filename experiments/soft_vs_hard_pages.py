"""The pages ``scripts/soft_vs_hard.py`` writes from its report: ``report.md`` (every number), ``summary.md``
(the held-out reading at a glance, for a docs page to include), the verdict lines and ``seeds.png``.

Every function reads the report dict ``soft_vs_hard.analyse`` builds (and ``main`` completes with the
decoding ``setting``); none computes a score, so a page can never say what the report does not hold.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only
import matplotlib.pyplot as plt
import numpy as np

# BLEU-4 as coco-caption computes it, and without its brevity penalty as Xu et al. (2015) report it.
METRICS = {"Bleu_4": "BLEU-4", "Bleu_4_nobp": "BLEU-4 without BP", "CIDEr": "CIDEr-D"}


def interval(d: dict, digits: int) -> str:
    """``[low, high]`` ×100 of a difference's interval (or its ``seeds_too`` / ``seed_means_t`` one)."""
    return f"[{100 * d['low']:+.{digits}f}, {100 * d['high']:+.{digits}f}]"


def fmt(stat: dict, scale: float) -> str:
    mean, std, ci = (stat[k] * scale for k in ("mean", "std", "ci95"))
    return f"{mean:.2f}" if np.isnan(std) else f"{mean:.2f} ± {std:.2f} (±{ci:.2f})"


def setting_lines(setting: dict) -> list[str]:
    """The decoding the table is at, and how it was chosen."""
    if not setting["candidates"]:
        return [f"Decoding: `{setting['chosen']}` (the one evaluated setting, or given by --setting).", ""]
    lines = [
        f"Decoding: `{setting['chosen']}`, chosen once for every model as the highest mean CIDEr-D over all "
        "runs on the even half; the odd half is the held-out reading.",
        "",
        "| setting | mean CIDEr-D, even half | mean BLEU-4, even half |",
        "|---|---|---|",
    ]
    for name, c in setting["candidates"].items():
        mark = " (chosen)" if name == setting["chosen"] else ""
        lines.append(f"| `{name}`{mark} | {100 * c['CIDEr']:.2f} | {100 * c['Bleu_4']:.2f} |")
    return [*lines, ""]


def markdown(report: dict, missing: list[str], command: str) -> str:
    base = report["baseline"]
    lines = [
        "# Soft vs hard attention",
        "",
        f"`{command}`",
        "",
        f"{report['images']} images, {report['tokenizer']} tokenizer, scores x100. Cells: mean ± sample std over "
        "seeds (± half-width of the 95% t interval of the mean). Halves: even / odd positions of the sorted "
        "image ids.",
        "",
        *setting_lines(report["setting"]),
        "| configuration | seeds | "
        + " | ".join(f"{n} ({p})" for n in METRICS.values() for p in ("all", "even", "odd"))
        + " |",
        "|---|---|" + "---|" * (3 * len(METRICS)),
    ]
    for label, e in report["configs"].items():
        cells = [fmt(e["summary"][p][m], 100) for m in METRICS for p in ("all", "even", "odd")]
        lines.append(f"| {label} | {len(e['seeds'])} | " + " | ".join(cells) + " |")
    ratios = {
        label: np.mean([v["length_ratio"] for v in e["per_seed"]["all"].values()])
        for label, e in report["configs"].items()
    }
    lines += [
        "",
        "Length ratio c / r (the captions' summed length over the closest references'; BLEU's brevity "
        "penalty exp(1 − r/c) applies below 1), mean over seeds: "
        + ", ".join(f"{label} {r:.3f}" for label, r in ratios.items())
        + ". Without BP a configuration whose captions are shorter loses nothing for it, which is how "
        "Xu et al. computed BLEU.",
    ]
    lines += [
        "",
        f"Difference from `{base}` (seeds pooled per image; paired bootstrap over images, 95% percentile "
        "interval; where both sides have two or more seeds, seeds too: each side's seeds resampled as well "
        "(approximate), and seed means' t: the Welch t interval of the seeds' means; wins: fraction of seed "
        "pairs in which the configuration scores higher):",
        "",
        "| configuration | metric | half | difference | 95% interval | significant | seeds too | significant "
        "| seed means' t | significant | seed-pair wins |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, e in report["configs"].items():
        for part, diffs in e["vs_baseline"].items():
            for m, d in diffs.items():
                cells = [f"{100 * d['delta']:+.2f}", interval(d, 2), "yes" if d["significant"] else "no"]
                for extra in (d.get("seeds_too"), d.get("seed_means_t")):
                    cells += (
                        [interval(extra, 2), "yes" if extra["significant"] else "no"] if extra else ["–", "–"]
                    )
                lines.append(
                    f"| {label} | {METRICS[m]} | {part} | "
                    + " | ".join(cells)
                    + f" | {d['seed_pair_wins']:.2f} |"
                )
    lines += ["", *verdict_lines(report)]
    if missing:
        lines += ["", "Failed or unfinished (no results.json): " + ", ".join(missing)]
    return "\n".join(lines) + "\n"


def read_part(report: dict) -> str:
    """The half the report reads its verdicts on: the held-out odd half when the decoding was chosen on the
    even one, else the whole split."""
    return "odd" if report["setting"]["candidates"] else "all"


def summary_table(report: dict) -> str:
    """``summary.md``: the report at a glance, read where the decoding was not chosen (the held-out odd half,
    else the whole split): per configuration its seeds' mean ± std, and against the baseline the difference
    with its 95% paired bootstrap interval, CIDEr-D's interval with the seeds resampled too, and the seed
    pairs it wins; then the verdicts. No links, so a docs page can take it in with ``--8<--``."""
    part = read_part(report)
    base = report["baseline"]
    n = report["images"]
    where = f"the held-out odd half ({n // 2} of {n} images)" if part == "odd" else f"all {n} images"
    short = {"Bleu_4": "BLEU-4", "Bleu_4_nobp": "BLEU-4 no BP", "CIDEr": "CIDEr-D"}
    head = ["configuration", "seeds", *short.values(), *(f"Δ {name} [95%]" for name in short.values()),
            "Δ CIDEr-D: seeds too", "Δ CIDEr-D: seed means' t", "seed pairs above (CIDEr-D)"]  # fmt: skip
    lines = [
        f"At `{report['setting']['chosen']}`, on {where}, ×100: mean ± std over seeds; Δ: minus `{base}`, with "
        "the 95% paired bootstrap interval (images resampled, seeds pooled per image): would these trained "
        "models differ on other photos. Where both sides have two or more seeds, two 95% intervals that ask "
        "whether the recipes would differ if trained again: seeds too (each side's seeds resampled as well as "
        "the images; approximate) and seed means' t (Welch's t over the seeds' scores; few seeds make it wide).",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for label, e in report["configs"].items():
        stats = e["summary"][part]
        cells = [f"{100 * stats[m]['mean']:.1f}" + ("" if np.isnan(stats[m]["std"]) else f" ± {100 * stats[m]['std']:.1f}")
                 for m in METRICS]  # fmt: skip
        diffs = e["vs_baseline"].get(part, {})
        for m in METRICS:
            d = diffs.get(m)
            cells.append(
                f"{100 * d['delta']:+.1f} {interval(d, 1)}" + (" *" if d["significant"] else "") if d else "–"
            )
        d = diffs.get("CIDEr")
        for key in ("seeds_too", "seed_means_t"):
            extra = d and d.get(key)
            cells.append(interval(extra, 1) + (" *" if extra["significant"] else "") if extra else "–")
        n_pairs = len(e["seeds"]) * len(report["configs"][base]["seeds"])
        cells.append(f"{round(d['seed_pair_wins'] * n_pairs)} of {n_pairs}" if d else "–")
        lines.append(f"| {label} | {len(e['seeds'])} | " + " | ".join(cells) + " |")
    lines += ["", "\\* the interval excludes 0.", "", *verdict_lines(report)]
    return "\n".join(lines) + "\n"


def verdict_lines(report: dict) -> list[str]:
    """Which differences from the baseline are significant, read where the decoding was not chosen (the odd
    half when it was chosen on the even one, else the whole split): over the images, and where both sides
    have two or more seeds, whether it holds with the seeds resampled too and in the seeds' own t interval."""
    part = read_part(report)
    where = "the held-out odd half" if part == "odd" else "the whole split"
    base = report["baseline"]
    lines = [
        f"Read on {where} (95% intervals; significant = the interval excludes 0; first the paired bootstrap "
        "over images, then, where both sides have two or more seeds, seeds too and seed means' t):",
        "",
    ]
    for label, e in report["configs"].items():
        diffs = e["vs_baseline"].get(part)
        if not diffs:
            continue
        said = []
        for m, d in diffs.items():
            if not d["significant"]:
                said.append(f"not different on {METRICS[m]}")
                continue
            side = "above" if d["delta"] > 0 else "below"
            levels = {"seeds too": d.get("seeds_too"), "seed means' t": d.get("seed_means_t")}
            shown = "".join(f"; {name} {interval(iv, 2)}" for name, iv in levels.items() if iv)
            failed = [name for name, iv in levels.items() if iv and not iv["significant"]]
            said.append(
                f"{side} on {METRICS[m]} ({100 * d['delta']:+.2f} {interval(d, 2)}{shown})"
                + (f", over images only: not with {' or '.join(failed)}" if failed else "")
            )
        single = [
            name
            for name, n in ((label, len(e["seeds"])), (base, len(report["configs"][base]["seeds"])))
            if n < 2
        ]
        caveat = f" ({' and '.join(single)}: one seed, so over images only)" if single else ""
        lines.append(f"- {label} against {base}{caveat}: " + "; ".join(said) + ".")
    return lines


def short_labels(labels: list[str]) -> list[str]:
    """Tick labels: the prefix every configuration shares dropped (``flickr8k_``), an extra reading's setting
    below it without the split, one option a line (``@ beam5`` / ``hard_attention=expected``), so neighbouring
    labels do not run into each other."""
    names = [label.split(" @ ")[0] for label in labels]
    cut = len(os.path.commonprefix(names)) if len(names) > 1 else 0
    cut = names[0].rfind("_", 0, cut) + 1 if cut else 0  # a whole word of the prefix, never half a name
    out = []
    for label, name in zip(labels, names):
        _, sep, setting = label.partition(" @ ")
        options = re.sub(r"-(?=[A-Za-z_])", "\n", setting.partition("-")[2] or setting)  # not a value's minus
        out.append(name[cut:] + (f"\n@ {options}" if sep else ""))
    return out


def chart(report: dict, path: Path) -> None:
    """Per metric a panel: every seed a dot, the mean with its 95% t interval, on the half the report reads
    (the held-out odd half when the decoding was chosen on the even one)."""
    labels = list(report["configs"])
    part = read_part(report)
    chosen = report["setting"]["chosen"]
    fig, axes = plt.subplots(
        len(METRICS), 1, sharex=True, figsize=(2.5 + 1.3 * len(labels), 2.3 * len(METRICS))
    )
    for ax, (m, name) in zip(axes, METRICS.items()):
        for x, label in enumerate(labels):
            e = report["configs"][label]
            values = [100 * v[m] for v in e["per_seed"][part].values()]
            ax.plot(np.full(len(values), x - 0.08), values, "o", alpha=0.7, color=f"C{x}")
            s = e["summary"][part][m]
            if not np.isnan(s["ci95"]):
                ax.errorbar(x + 0.08, 100 * s["mean"], yerr=100 * s["ci95"], fmt="k_", capsize=4)
        ax.set_ylabel(f"{name} (×100)")
        ax.grid(axis="y", alpha=0.3)
    axes[-1].set_xticks(range(len(labels)), short_labels(labels), fontsize=8)
    where = "held-out odd half of" if part == "odd" else "all of"
    fig.suptitle(
        f"{where} {report.get('images', '?')} images, {chosen or 'one setting'}: dots = seeds, bar = mean ± 95% t interval",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
