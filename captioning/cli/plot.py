"""``captioning plot RUN_DIR [--out curves.png]``: redraw a run's training curves from its metrics.csv."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from captioning.cli.arguments import path_arg


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "plot", help="draw a training run's train/val curves (curves.png)", description=__doc__
    )
    p.add_argument("run_dir", type=Path, help="a run folder (outputs/<date>/<time>) or its metrics.csv")
    p.add_argument(
        "--out",
        type=path_arg,
        default=None,
        help="default: curves.png beside metrics.csv; never the metrics, a checkpoint or a device",
    )


def run(args: argparse.Namespace) -> int:
    from captioning.training.curves import find_metrics, plot_curves
    from captioning.writes import output

    try:
        metrics_csv = find_metrics(args.run_dir)
        out = output(  # checked before drawing; written whole or not at all (captioning/writes.py)
            args.out if args.out is not None else metrics_csv.with_name("curves.png"),
            "the plot",
            flag="--out" if args.out is not None else "",
            inputs={metrics_csv: "the metrics.csv being plotted"},
        )
        _check_format(out.path)
        with out.replacing() as temp:  # the temp file keeps the suffix matplotlib picks the format by
            plot_curves(args.run_dir, temp)
    except (OSError, ValueError) as err:
        reason = f"{err.filename}: {err.strerror}" if isinstance(err, OSError) and err.strerror else err
        print(f"captioning plot: error: {reason}", file=sys.stderr)
        return 2
    print(f"wrote {out.path}")
    return 0


def _check_format(path: Path) -> None:
    """matplotlib picks the format by the suffix (kept by the temp file it writes): a known one."""
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    if path.suffix.lower().lstrip(".") not in formats:
        raise ValueError(
            f"--out {path}: the suffix {path.suffix or '(none)'} names no image format; expected one of "
            + ", ".join(f".{f}" for f in sorted(formats))
        )
