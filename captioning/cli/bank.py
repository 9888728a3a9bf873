"""``captioning bank --checkpoint CKPT [--checkpoint CKPT ...] --out BANK.safetensors [data=flickr8k] [split=train]``

Builds the caption bank consensus reranking reads (``captioning.inference.caption_bank``): every image of a
split (default: train) through the checkpoint's encoder (the feature cache's grids for a frozen one),
pooled, beside its reference captions. ``captioning caption IMG --checkpoint CKPT --rerank BANK`` then
reranks without the data set. Several ``--checkpoint``: the bank of their ensemble, through its encoders
(one shared frozen encoder, or each member's own side by side), for ``caption`` with the same
``--checkpoint`` list. Overrides compose captioning/conf/eval.yaml, as ``captioning evaluate``.
An unreadable image is left out and named on stderr (one line each, then how many); the exit status is
then 1, as evaluate's.
"""

from __future__ import annotations

import argparse
import sys

from captioning.cli.arguments import add_checkpoints, path_arg


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "bank",
        aliases=["memory"],  # its name before 0.3; scripts that call `captioning memory` keep working
        help="build the caption bank of consensus reranking from a data split (default: train)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(command="bank")  # typed as its alias, it still runs (and names itself) as bank
    add_checkpoints(
        parser,
        "the .ckpt or .safetensors to rerank for; given more than once, their ensemble (the same list as "
        "captioning caption's)",
    )
    parser.add_argument(
        "--out",
        required=True,
        type=path_arg,
        help="the bank file to write (.safetensors), checked before the build: an earlier bank there is "
        "replaced, never the checkpoint, another model file or a device; a missing folder is created",
    )
    parser.add_argument(
        "overrides", nargs="*", help="Hydra overrides of captioning/conf/eval.yaml, e.g. data=flickr8k"
    )
    return parser


def run(args: argparse.Namespace) -> int:
    from captioning.checkpoints.ensemble import load_checkpoints
    from captioning.compose import compose_config
    from captioning.errors import one_line, user_errors
    from captioning.inference.evaluation import build_source
    from captioning.inference.split_decoding import build_caption_bank, frozen_feature_cache
    from captioning.training.validate import check_eval_config
    from captioning.writes import BANK, output

    try:
        out = output(  # before the build: an unusable --out would lose it all (captioning/writes.py)
            args.out,
            "the caption bank",
            flag="--out",
            inputs={c: "a checkpoint the bank is built with (--checkpoint)" for c in args.checkpoint},
            kind=BANK,
        )
        cfg, _ = compose_config("eval", ["split=train", *args.overrides])
        check_eval_config(cfg)
        source = build_source(cfg.data, cfg.split)
        loaded = load_checkpoints(args.checkpoint)
        cache = frozen_feature_cache(loaded, cfg.paths.cache if cfg.feature_cache else None)
        skipped: list[str] = []  # unreadable images, left out of the bank: one line each below
        bank = build_caption_bank(loaded, source, cache, skipped=skipped)
        bank.save(out)
    except (*user_errors(), ValueError, RuntimeError, OSError) as err:
        print(f"captioning bank: error: {one_line(err)}", file=sys.stderr)
        return 2
    for line in skipped:
        print(f"captioning bank: skipped {line}", file=sys.stderr)
    print(f"wrote {args.out}: {len(bank)} images of {cfg.split}, {bank.vectors.shape[1]}-d pooled grids")
    if skipped:  # as evaluate: the work is done, without every image
        print(
            f"captioning bank: {len(skipped)} of {len(source)} images could not be read and are not in the "
            "bank",
            file=sys.stderr,
        )
        return 1
    return 0
