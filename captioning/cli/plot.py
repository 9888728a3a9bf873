"""``captioning plot RUN_DIR [--out curves.png]``: redraw a run's training curves from its metrics.csv."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from captioning.cli.runtime import path_arg


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "plot", help="draw a training run's train/val curves (curves.png)", description=__doc__
    )
    p.add_argument("run_dir", type=Path, help="a run folder (outputs/<date>/<time>) or its metrics.csv")
    p.add_argument("--out", type=path_arg, default=None, help="default: curves.png beside metrics.csv")


def run(args: argparse.Namespace) -> int:
    from captioning.training.curves import plot_curves

    try:
        out = plot_curves(args.run_dir, args.out)
    except (OSError, ValueError) as err:
        reason = f"{err.filename}: {err.strerror}" if isinstance(err, OSError) and err.strerror else err
        print(f"captioning plot: error: {reason}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0
