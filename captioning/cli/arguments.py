"""argparse helpers shared by the ``captioning`` subcommands (the process settings the entry points apply
at start-up are in ``captioning.runtime``)."""

from __future__ import annotations

import argparse
from pathlib import Path


def path_arg(text: str) -> Path:
    """argparse ``type`` for a file argument: an empty string (an unset variable) would be Path('.')."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty string is not a file path (an unset variable?)")
    return Path(text)


def checkpoint_arg(text: str) -> str:
    """argparse ``type`` of every ``--checkpoint``: a file path or the name of a zoo model, kept as given.
    A name is resolved to its file after parsing (captioning/cli/paths.py ``resolve_checkpoints``), so that
    a misspelt one is one line with the nearest names, not argparse's usage block before it."""
    path_arg(text)  # an empty string is no file and no name
    return text


ENSEMBLE_HELP = (
    "given more than once (--checkpoint A --checkpoint B), their ensemble: the mean of their next-word "
    "distributions (they must share the vocabulary, the input size and the grid size; each member keeps its "
    "own encoder)"
)

ZOO_HELP = "a zoo model's name (e.g. flickr8k-wide-scst; `captioning models` lists them)"


def add_checkpoints(parser: argparse.ArgumentParser, help: str) -> None:
    """The ``--checkpoint`` of the commands that read models: required, repeatable (``args.checkpoint`` is a
    list: an ensemble, or refused by the command that serves one model), each a file or a zoo name. ``help``
    says what the command takes; the zoo names are said here, once for all of them."""
    parser.add_argument(
        "--checkpoint",
        required=True,
        action="append",
        type=checkpoint_arg,
        metavar="CKPT|NAME",
        help=f"{ZOO_HELP}, or {help}",
    )
