"""``captioning caption IMAGE [IMAGE ...] --checkpoint CKPT [--beam K] [--overlay OUT.png] [--json]``.

Captions every readable image; each unreadable one is reported on stderr with its path and the reason,
and the exit status is then 1 (after the good images have been captioned)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from captioning.checkpoint import CheckpointError, load_captioner
from captioning.data.images import ImageError, load_rgb
from captioning.inference import caption_images, overlay_paths
from captioning.viz import save_attention_figure

BATCH = 32


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("caption", help="caption images with a trained checkpoint")
    p.add_argument("images", nargs="+", type=Path, help="image files (JPEG, PNG, ...)")
    p.add_argument("--checkpoint", required=True, type=Path, help="a .ckpt written by captioning-train")
    p.add_argument("--beam", type=int, default=1, help="beam size (1 = greedy)")
    p.add_argument("--max-length", type=int, default=None, help="maximum words (default: the checkpoint's)")
    p.add_argument("--overlay", type=Path, default=None, help="write per-word attention overlays to this PNG")
    p.add_argument("--json", action="store_true", help="print one JSON object per image")


def run(args: argparse.Namespace) -> int:
    if args.beam < 1:
        print(f"error: --beam must be >= 1, got {args.beam}", file=sys.stderr)
        return 2
    try:
        model = load_captioner(args.checkpoint)
    except CheckpointError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    good, names, failures = [], [], 0
    for path in args.images:
        try:
            good.append(load_rgb(path))
            names.append(str(path))
        except ImageError as err:
            print(f"error: {err}", file=sys.stderr)
            failures += 1
    captions = []
    for start in range(0, len(good), BATCH):
        captions += caption_images(
            model, good[start : start + BATCH], names[start : start + BATCH], args.beam, args.max_length
        )
    paths = overlay_paths(args.overlay, names) if args.overlay and names else []
    for i, cap in enumerate(captions):
        if paths:
            save_attention_figure(paths[i], good[i], cap.tokens, cap.attention, cap.grid)
        if args.json:
            print(json.dumps(cap.to_json()), flush=True)
        else:
            print(f"{cap.image}\t{cap.caption}" + (f"\t(overlay: {paths[i]})" if paths else ""), flush=True)
    if failures:
        print(f"{failures} of {len(args.images)} images could not be read", file=sys.stderr)
    return 1 if failures else 0
