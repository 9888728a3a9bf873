"""``captioning`` command: sub-commands caption, evaluate, score."""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("WANDB_MODE", "offline")

from captioning.cli import caption, evaluate, score  # noqa: E402
from captioning.runtime import keep_freed_memory  # noqa: E402

SUBCOMMANDS = {"caption": caption, "evaluate": evaluate, "score": score}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="captioning", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS.values():
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    keep_freed_memory()  # captioning/runtime.py
    return SUBCOMMANDS[args.command].run(args)


if __name__ == "__main__":
    sys.exit(main())
