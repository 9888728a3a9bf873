"""Training curves of a run, drawn from its CSV metrics: ``curves.png`` next to ``metrics.csv``.

Written by the ``TrainingCurves`` callback at the end of every run (also when it stops early), and
redrawn by ``captioning plot RUN_DIR``. The cross-entropy is drawn per training step with the
validation cross-entropy; every val/<metric> (BLEU-4, CIDEr-D, ...) gets its own panel, since their scales
differ (CIDEr-D runs to ~8 on synthetic scenes, BLEU to 1).
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from captioning.data.files import read_utf8_text


def find_metrics(run_dir: str | Path) -> Path:
    """The newest ``metrics.csv`` under ``run_dir`` (the CSV logger writes csv/version_N/metrics.csv)."""
    run_dir = Path(run_dir)
    if run_dir.is_file() and run_dir.name.endswith(".csv"):
        return run_dir
    found = sorted(run_dir.rglob("metrics.csv"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise FileNotFoundError(
            f"{run_dir}: no metrics.csv below it (nothing was logged: the CSV logger, logger=csv, writes a row "
            "every trainer.log_every_n_steps steps and at each validation)"
        )
    return found[-1]


def run_series(metrics_csv: Path) -> dict[str, list[tuple[int, float]]]:
    """The series of a whole run: a run resumed with ``ckpt_path=last`` logs into a new
    ``csv/version_N/``, so the versions beside ``metrics_csv`` (up to it, oldest first) are joined, each
    version's rows replacing an earlier one's from its first step on (steps logged after the checkpoint
    it resumed from were trained again)."""
    versions = [metrics_csv]
    if metrics_csv.parent.name.startswith("version_"):

        def number(p: Path) -> int:
            tail = p.parent.name.removeprefix("version_")
            return int(tail) if tail.isdigit() else -1

        mine = number(metrics_csv)
        versions = sorted(
            (p for p in metrics_csv.parent.parent.glob("version_*/metrics.csv") if 0 <= number(p) <= mine),
            key=number,
        ) or [metrics_csv]
    series: dict[str, list[tuple[int, float]]] = {}
    for path in versions:
        later = read_series(path)
        steps = [step for points in later.values() for step, _ in points]
        if steps:
            first = min(steps)
            series = {name: [(s, v) for s, v in points if s < first] for name, points in series.items()}
        for name, points in later.items():
            series.setdefault(name, []).extend(points)
    return {name: points for name, points in series.items() if points}


def read_series(metrics_csv: Path) -> dict[str, list[tuple[int, float]]]:
    """name -> [(step, value)] for every numeric column, rows without a value skipped."""
    series: dict[str, list[tuple[int, float]]] = {}
    text = read_utf8_text(metrics_csv)  # line endings untouched: the csv module splits the rows
    for line, row in enumerate(csv.DictReader(io.StringIO(text, newline="")), start=2):  # 1: the header
        step = row.get("step")
        if not step:
            continue
        try:
            step = int(float(step))
        except ValueError:
            raise ValueError(
                f"{metrics_csv}: line {line}: step={step!r} is not a number; expected the step column of "
                "a CSV logger's metrics.csv"
            ) from None
        for name, value in row.items():
            if name in ("step", "epoch") or value in ("", None):
                continue
            try:
                number = float(value)
            except ValueError:
                continue
            if math.isfinite(number):
                series.setdefault(name, []).append((step, number))
    return series


def plot_curves(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Draw the curves of a run into ``out`` (default: curves.png beside its metrics.csv); returns it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics_csv = find_metrics(run_dir)
    series = run_series(metrics_csv)  # a resumed run's versions joined
    # Cross-entropy, not train/loss: the loss adds regularisers (eq. 14 is ~30 on a 7x7 grid) that would
    # flatten the curve that matters.
    losses = [k for k in ("train/xent", "val/xent") if k in series]
    metrics = sorted(
        k for k in series if k.startswith("val/") and k not in ("val/loss", "val/xent", "val/attention_reg")
    )
    panels = (1 if losses else 0) + len(metrics)
    if panels == 0:
        raise ValueError(f"{metrics_csv}: no train/val losses or val metrics to plot")
    cols = min(3, panels)
    rows = math.ceil(panels / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    flat = iter(axes.flat)
    if losses:
        ax = next(flat)
        ax.axis("on")
        for name in losses:
            steps, values = zip(*series[name])
            style = {"marker": "o", "ms": 3} if name.startswith("val/") else {"lw": 1, "alpha": 0.8}
            ax.plot(steps, values, label=name, **style)
        ax.set_xlabel("step")
        ax.set_title("cross-entropy (nats per token)")
        ax.legend(fontsize=8)
    for name in metrics:
        ax = next(flat)
        ax.axis("on")
        steps, values = zip(*series[name])
        best = max(range(len(values)), key=values.__getitem__)
        ax.plot(steps, values, marker="o", ms=3)
        ax.annotate(f"best {values[best]:.3f}", (steps[best], values[best]), fontsize=8,
                    textcoords="offset points", xytext=(0, 6), ha="center")  # fmt: skip
        ax.set_xlabel("step")
        ax.set_title(name)
    fig.suptitle(str(Path(run_dir).name or run_dir), fontsize=10)
    fig.tight_layout()
    out = Path(out) if out is not None else metrics_csv.with_name("curves.png")
    if out.is_dir():
        plt.close(fig)
        raise ValueError(
            f"--out {out}: is a folder; expected the path of the image to write (e.g. curves.png)"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
