"""``captioning tune --checkpoint CKPT [--checkpoint CKPT ...] [overrides] [--num-beams 3 5] [--length-penalty 0 0.5 1]
[--no-repeat-ngram-size 0 3] [--write]`` (overrides before the list flags, which take every value after them)

Decodes the dev split (``split=val``, composing captioning/conf/eval.yaml like ``captioning evaluate``) once per
setting of the grid, scores each by CIDEr-D, prints the table with the held-out check (chosen on one half
of the images, reported on the other) and writes ``tuning.json``; ``--write`` stores the best setting as
the checkpoint's (or export's) decoding defaults, which ``caption``, ``evaluate`` and the API then use.
The other decoding options (``--max-new-tokens 20``, ``--repetition-penalty 1.2`` ... or the same Hydra
overrides, ``decoding.max_new_tokens=20``) are held fixed over the grid (recorded in tuning.json as
``fixed``; ``--write`` stores the searched ones only).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from captioning.cli.arguments import add_checkpoints, path_arg
from captioning.cli.decoding_flags import add_decoding_arguments, merge_into_overrides
from captioning.writes import Output, output, replaceable_in_place
from captioning.zoo import refuse_zoo_write


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "tune",
        help="tune beam width, length penalty and n-gram blocking on dev by CIDEr-D; --write stores the best",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_checkpoints(
        parser,
        "a .ckpt or an exported .safetensors; given more than once, their ensemble (tuned, not --write)",
    )
    parser.add_argument("--num-beams", type=int, nargs="+", default=[3, 5])
    parser.add_argument("--length-penalty", type=float, nargs="+", default=[0.0, 0.5, 1.0])
    parser.add_argument("--no-repeat-ngram-size", type=int, nargs="+", default=[0, 3])
    parser.add_argument(
        "--hard-attention",
        nargs="+",
        choices=("cell", "expected"),
        default=None,
        help="hard-attention models: also search the context read at inference (default: the stored one)",
    )
    parser.add_argument(
        "--write",
        action="store_true",
        help="store the best setting in the checkpoint (replaced atomically; a symbolic link is kept and the "
        "file it points to rewritten)",
    )
    parser.add_argument(
        "--out",
        type=path_arg,
        default=None,
        help="tuning.json (default: outputs/tune/...); never a checkpoint, an input or a device",
    )
    parser.add_argument(
        "overrides", nargs="*", help="Hydra overrides of captioning/conf/eval.yaml, e.g. data=flickr8k"
    )
    add_decoding_arguments(parser, skip=tuple(GRID_FLAGS), seed=False, overrides=True)  # held fixed
    return parser


GRID_FLAGS = {  # the options searched, each over its flag's values
    "num_beams": "--num-beams",
    "length_penalty": "--length-penalty",
    "no_repeat_ngram_size": "--no-repeat-ngram-size",
    "hard_attention": "--hard-attention",
}


def check_args(args: argparse.Namespace) -> str | None:
    """Before anything heavy: the fixed decoding flags become decoding.* overrides (one line if they
    disagree); an override of a searched option is refused (it would be searched over anyway)."""
    return merge_into_overrides(args, grid=GRID_FLAGS)


def _table(rows, chosen) -> str:
    context = "hard_attention" in rows[0].options
    lines = ["num_beams  length_penalty  no_repeat_ngram  " + ("context   " if context else "")
             + "CIDEr-D  (even / odd half)  words"]  # fmt: skip
    for r in rows:
        o = r.options
        mark = "  <- best" if r is chosen else ""
        lines.append(
            f"{o['num_beams']:>9}  {o['length_penalty']:>14}  {o['no_repeat_ngram_size']:>15}  "
            + (f"{o['hard_attention']:<8}  " if context else "")
            + f"{100 * r.cider:7.2f}  ({100 * r.cider_even:6.2f} / {100 * r.cider_odd:6.2f})  "
            f"{r.mean_length:5.2f}{mark}"
        )
    return "\n".join(lines)


def _check_outputs(args: argparse.Namespace, default_out: Path) -> tuple[Output, Path | None]:
    """Before the grid runs (an unusable path would lose it all): the JSON output, never over a
    checkpoint, an input or a device (captioning/writes.py), and the file ``--write`` rewrites: the
    checkpoint itself, or through a symbolic link the file it points to (the link is kept)."""
    inputs = {c: f"a checkpoint being tuned (--checkpoint {c})" for c in args.checkpoint}
    flag = "--out" if args.out is not None else "the default output"
    out = output(args.out or default_out, "the tuning results (JSON)", flag=flag, inputs=inputs)
    if args.write and len(args.checkpoint) > 1:
        raise ValueError(
            f"--write: an ensemble of {len(args.checkpoint)} checkpoints has no one file to store its decoding "
            "in; tune it without --write and pass the chosen options when decoding"
        )
    if not args.write:
        return out, None
    refuse_zoo_write(args.checkpoint[0], "--write")  # a zoo file: its own SHA-256 check would refuse it
    if not args.checkpoint[0].exists():  # loading it names what is wrong
        return out, args.checkpoint[0]
    return out, replaceable_in_place(args.checkpoint[0], "the checkpoint", flag="--write: --checkpoint")


def run(args: argparse.Namespace) -> int:
    from omegaconf import OmegaConf

    from captioning import progress
    from captioning.checkpoints.defaults import write_decoding_defaults
    from captioning.checkpoints.ensemble import load_checkpoints, members_label, members_stem
    from captioning.compose import compose_config
    from captioning.decoding.captions import BrokenOutput, EmptyCaptions
    from captioning.decoding.config import GenerationConfig, check_option
    from captioning.decoding.search import hard_attention_layers
    from captioning.errors import one_line, user_errors
    from captioning.inference.evaluation import build_source
    from captioning.inference.split_decoding import decode_source, frozen_feature_cache
    from captioning.inference.tuning import SplitScorer, best, grid, held_out, score_setting
    from captioning.training.validate import check_eval_config

    label = members_label(args.checkpoint)  # one file, or the ensemble's members
    try:
        axes = {
            "num_beams": args.num_beams,
            "length_penalty": args.length_penalty,
            "no_repeat_ngram_size": args.no_repeat_ngram_size,
        }
        if args.hard_attention:
            axes["hard_attention"] = args.hard_attention
        settings = grid(**axes)
        for options in settings:
            for name, value in options.items():
                check_option(name, value)
        cfg, choices = compose_config("eval", ["split=val", *args.overrides])
        check_eval_config(cfg)
        default_out = (
            Path("outputs") / "tune" / members_stem(args.checkpoint) / f"{choices['data']}-{cfg.split}.json"
        )
        out, write_target = _check_outputs(args, default_out)  # before the grid: its work would be lost
        source = build_source(cfg.data, cfg.split)
        if len(source) < 2:  # the choice is checked on a held-out half: each half needs an image
            raise ValueError(f"the {cfg.split} split has {len(source)} image(s); tuning needs at least 2")
        loaded = load_checkpoints(args.checkpoint)
        if args.hard_attention and not hard_attention_layers(loaded.net.decoder):
            raise ValueError(
                f"--hard-attention: {label} has no hard attention to decode either way (soft "
                "attention reads the expected context already)"
            )
        cache = frozen_feature_cache(loaded, cfg.paths.cache if cfg.feature_cache else None)
    except (*user_errors(), ValueError) as err:
        print(f"captioning tune: error: {one_line(err)}", file=sys.stderr)
        return 2
    stored = GenerationConfig.from_dict(loaded.decoding)
    fixed = {k: v for k, v in OmegaConf.to_container(cfg.decoding).items() if v is not None}
    try:
        base = stored.replace(**fixed)  # checked with every setting of the grid, before any decoding
        for options in settings:
            base.replace(**options)
    except ValueError as err:
        print(f"captioning tune: error: {label}: {one_line(err)}", file=sys.stderr)
        return 2
    scorer = SplitScorer(source)
    rows, left_out = [], []
    for options in progress.track(settings, "tuning", unit="setting"):
        decoding = base.replace(**options).to_dict()
        try:
            decoded = decode_source(loaded, source, decoding, cfg.batch_size, cache)
        except EmptyCaptions as err:  # this setting captions nothing (an undertrained model's beam at lp 0)
            print(f"  {options}: left out: {err}", file=sys.stderr, flush=True)
            left_out.append({"options": options, "reason": str(err)})
            continue
        except BrokenOutput as err:  # NaN scores: broken weights, whatever the setting; nothing to --write
            print(f"captioning tune: error: {label}: {err}", file=sys.stderr)
            return 2
        rows.append(score_setting(options, dict(zip(decoded.indices, decoded.captions)), scorer))
        print(f"  {options}: CIDEr-D {100 * rows[-1].cider:.2f}", flush=True)
    if not rows:
        print(
            f"captioning tune: error: {label}: no setting of the grid gave captions (above)", file=sys.stderr
        )
        return 2
    chosen = best(rows)
    # the stored setting when it was tuned (what the checkpoint decodes with today), else the first tuned
    stored_options = {k: getattr(stored, k) for k in settings[0]}
    tuned = [r.options for r in rows]
    baseline = stored_options if stored_options in tuned else tuned[0]
    if stored_options in settings and stored_options not in tuned:  # the held-out gains are against another
        print(f"the stored setting {stored_options} was left out: held-out gains are against {baseline}")
    check = held_out(rows, baseline)
    print(_table(rows, chosen))
    for name, entry in check.items():
        print(f"held out, {name.replace('_', ' ')}: {entry}")
    payload = {
        "checkpoint": label,
        "data": f"{choices['data']}/{cfg.split}",
        "stored_before": stored.to_dict(),
        "fixed": fixed,
        "rows": [r.to_dict() for r in rows],
        "best": chosen.to_dict(),
        "held_out": check,
        "baseline": baseline,
        "left_out": left_out,  # settings that captioned nothing, with why
    }
    try:
        out.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {out.path}")
        if write_target is not None:  # the link's target when --checkpoint is a symbolic link
            new = write_decoding_defaults(write_target, chosen.options)
            via = f" (through the link to {write_target})" if args.checkpoint[0].is_symlink() else ""
            print(f"stored in {args.checkpoint[0]}{via}: {new}")
    except (OSError, ValueError, *user_errors()) as err:  # ValueError: the output changed during the grid
        print(f"captioning tune: error: {one_line(err)}", file=sys.stderr)
        return 1
    return 0
