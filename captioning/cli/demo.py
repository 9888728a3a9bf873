"""``captioning demo --checkpoint CKPT [--host 127.0.0.1] [--port 7860]``: the demo page, served locally.

Needs the ``demo`` extra (``pip install 'captioning[demo]'``: Gradio)."""

from __future__ import annotations

import argparse
import os
import sys

from captioning.cli.runtime import path_arg


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "demo", help="serve the demo page (upload an image, see captions and attention)"
    )
    p.add_argument("--checkpoint", required=True, type=path_arg, help="a .ckpt or an exported .safetensors")
    p.add_argument(
        "--host", default="127.0.0.1", help="address to serve on (default: 127.0.0.1, this machine)"
    )
    p.add_argument("--port", type=int, default=7860)
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto")


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # offline-first: no telemetry calls
    try:
        import gradio  # noqa: F401
    except ImportError:
        print("error: the demo needs Gradio: pip install 'captioning[demo]'", file=sys.stderr)
        return 2
    from captioning.checkpoints.load import CheckpointError
    from captioning.inference.captioner import Captioner
    from captioning.inference.demo import build_demo

    try:
        captioner = Captioner.from_checkpoint(args.checkpoint, device=args.device)
    except (CheckpointError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"serving {args.checkpoint} on http://{args.host}:{args.port}", flush=True)
    build_demo(captioner).launch(server_name=args.host, server_port=args.port, share=False, show_error=True)
    return 0
