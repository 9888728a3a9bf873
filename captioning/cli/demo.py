"""``captioning demo --checkpoint CKPT [--host 127.0.0.1] [--port 7860]``: the demo page, served locally.

Needs the ``demo`` extra (``pip install 'captioning[demo]'``: Gradio)."""

from __future__ import annotations

import argparse
import os
import socket
import sys

from captioning.cli.runtime import path_arg


def _port(text: str) -> int:
    """argparse ``type``: a TCP port number."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1-65535)") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port number (1-65535)")
    return port


def check_address(host: str, port: int) -> str | None:
    """Why the page cannot be served on ``host:port`` (an unknown host, a port in use), or None: checked
    by binding it once, before the model is loaded and Gradio reports it in a traceback."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as err:
        return f"--host {host!r}: not an address of this machine or a resolvable name ({err})"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        try:
            probe.bind(address)
        except OSError as err:
            return f"--host {host} --port {port}: cannot serve there ({err.strerror or err})"
    return None


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "demo", help="serve the demo page (upload an image, see captions and attention)"
    )
    p.add_argument("--checkpoint", required=True, type=path_arg, help="a .ckpt or an exported .safetensors")
    p.add_argument(
        "--host", default="127.0.0.1", help="address to serve on (default: 127.0.0.1, this machine)"
    )
    p.add_argument("--port", type=_port, default=7860, help="TCP port, 1-65535 (default: 7860)")
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

    problem = check_address(args.host, args.port)
    if problem:
        print(f"captioning demo: error: {problem}", file=sys.stderr)
        return 2

    try:
        captioner = Captioner.from_checkpoint(args.checkpoint, device=args.device)
    except (CheckpointError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"serving {args.checkpoint} on http://{args.host}:{args.port}", flush=True)
    build_demo(captioner).launch(server_name=args.host, server_port=args.port, share=False, show_error=True)
    return 0
