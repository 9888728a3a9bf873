"""``captioning demo --checkpoint CKPT [--host 127.0.0.1] [--port 7860] [--max-upload-mb 50]``: the demo
page, served locally.

Prints one line with the URL once the page is served (Gradio's own start-up lines, whose ``share=True``
advice does not apply, are silenced), and one warning line when ``--host`` makes the page reachable from
the network. Uploads over ``--max-upload-mb`` are refused by Gradio at upload, before they are stored.
One model per page: ``--checkpoint`` given twice is refused.

Needs the ``demo`` extra (``pip install 'captioning[demo]'``: Gradio)."""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import sys
from pathlib import Path

from captioning.cli.arguments import add_checkpoints


def _port(text: str) -> int:
    """argparse ``type``: a TCP port number."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1-65535)") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port number (1-65535)")
    return port


def _megabytes(text: str) -> float:
    """argparse ``type``: a positive number of megabytes (MiB)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of megabytes") from None
    if not 0 < value < 2**20:
        raise argparse.ArgumentTypeError(f"{text}: expected a number of megabytes > 0")
    return value


def exposure_warning(host: str) -> str | None:
    """One line when ``host`` is not a loopback address: the page is then reachable from the network
    (anyone who can reach this machine can use the model and upload files), else None."""
    try:
        infos = socket.getaddrinfo(host, None)
    except (socket.gaierror, UnicodeError):
        return None  # check_address reports it
    addresses = {info[4][0].split("%")[0] for info in infos}
    if addresses and all(ipaddress.ip_address(a).is_loopback for a in addresses):
        return None
    return (
        f"captioning demo: warning: --host {host}: the page is reachable from the network (anyone who can "
        "reach this machine can use it); --host 127.0.0.1 keeps it to this machine"
    )


def page_url(host: str, port: int) -> str:
    """The address to open: this machine's loopback one when serving on every interface."""
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1" if host != "::" else "[::1]"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/"


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
        "demo",
        help="serve the demo page (upload an image, see captions and attention)",
        description=__doc__.split("\n\n")[0].replace("``", ""),
    )
    add_checkpoints(  # repeatable: given twice is refused in run(), not silently the last one
        p, "a .ckpt or an exported .safetensors (one: the page serves one model)"
    )
    p.add_argument(
        "--host", default="127.0.0.1", help="address to serve on (default: 127.0.0.1, this machine)"
    )
    p.add_argument("--port", type=_port, default=7860, help="TCP port, 1-65535 (default: 7860)")
    p.add_argument(
        "--max-upload-mb",
        type=_megabytes,
        default=50,
        help="larger uploads are refused at upload, before they are stored (default: 50)",
    )
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto")


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # offline-first: no telemetry calls
    try:
        import gradio  # noqa: F401
    except ImportError:
        print(
            "captioning demo: error: the demo needs Gradio: pip install 'captioning[demo]'", file=sys.stderr
        )
        return 2
    from captioning.checkpoints.load import CheckpointError
    from captioning.inference.captioner import Captioner
    from captioning.inference.demo import build_demo

    if len(args.checkpoint) > 1:
        given = ", ".join(str(c) for c in args.checkpoint)
        print(
            f"captioning demo: error: --checkpoint given {len(args.checkpoint)} times ({given}); "
            "the page serves one model: give one --checkpoint",
            file=sys.stderr,
        )
        return 2
    (checkpoint,) = args.checkpoint
    problem = check_address(args.host, args.port)
    if problem:
        print(f"captioning demo: error: {problem}", file=sys.stderr)
        return 2

    try:
        captioner = Captioner.from_checkpoint(checkpoint, device=args.device)
    except (CheckpointError, ValueError) as err:
        print(f"captioning demo: error: {err}", file=sys.stderr)
        return 2
    warning = exposure_warning(args.host)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    limit = int(args.max_upload_mb * 2**20)
    demo = build_demo(captioner, max_upload_bytes=limit)
    demo.launch(
        server_name=args.host,
        server_port=args.port,
        share=False,
        show_error=True,
        quiet=True,  # no Gradio start-up lines (their share=True advice does not apply): ours below
        max_file_size=limit,
        prevent_thread_lock=True,
    )
    print(
        f"captioning demo: serving {Path(checkpoint).name} on {page_url(args.host, args.port)} "
        "(Ctrl+C stops)",
        flush=True,
    )
    demo.block_thread()
    return 0
