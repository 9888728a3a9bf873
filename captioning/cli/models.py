"""``captioning models [--json]``: the zoo's models by name (captioning/zoo.py), where each one's file was
found (or that it is missing), its size and what it is. ``--checkpoint NAME`` takes any of these names.

``captioning models install --from CLONE|FOLDER|ARCHIVE [--to DIR]``: copy the zoo's files from a clone
(its docs/models/), a folder or a release archive (.zip, .tar.gz) into DIR (default
~/.cache/captioning/models, searched by name), each checked against its SHA-256 (captioning/zoo_install.py):
how a pip-installed package gets the models. Exit status 1 when a file was refused, 2 when nothing could be
installed."""

from __future__ import annotations

import argparse
import json
import sys


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "models",
        help="list the models usable by name (--checkpoint NAME, Captioner.from_pretrained), or install them",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("action", nargs="?", choices=["install"], help="install: copy the zoo's files (--from)")
    p.add_argument("--json", action="store_true", help="print one JSON object per model")
    p.add_argument("--from", dest="source", metavar="SOURCE", help="install: a clone, a folder or an archive")
    p.add_argument("--to", dest="dest", metavar="DIR", help="install: the folder (default: the user cache)")


def install(args: argparse.Namespace) -> int:
    from captioning.zoo_install import InstallError, install_models

    if not args.source:
        print("captioning models install: error: --from CLONE|FOLDER|ARCHIVE is required", file=sys.stderr)
        return 2
    try:
        done = install_models(args.source, args.dest)
    except InstallError as err:
        print(f"captioning models install: error: {err}", file=sys.stderr)
        return 2
    for item in done:
        stream = sys.stdout if item.status in ("installed", "already installed") else sys.stderr
        print(f"{item.name}: {item.status} ({item.path})", file=stream)
    refused = sum(item.status.startswith("not") for item in done)
    return 2 if refused == len(done) else 1 if refused else 0


def run(args: argparse.Namespace) -> int:
    if args.action == "install":
        return install(args)
    if args.source or args.dest:
        print("captioning models: error: --from/--to go with `captioning models install`", file=sys.stderr)
        return 2
    from captioning.zoo import ENV, listing, model_dirs

    rows = listing()
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    width = max(len(row["name"]) for row in rows)
    for row in rows:
        found = f"{row['size'] / 2**20:5.1f} MiB  {row['file']}" if row["file"] else "    missing"
        print(f"{row['name']:<{width}}  {row['data']:<9}  {found}")
        print(f"{'':<{width}}  {row['description']}")
    print(f"searched: {', '.join(str(d) for d in model_dirs())} (set ${ENV} to add a folder)")
    return 0
