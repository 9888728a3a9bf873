"""``captioning models [--json]``: the zoo's models by name (captioning/zoo.py), where each one's file was
found (or that it is missing), its size and what it is. ``--checkpoint NAME`` takes any of these names."""

from __future__ import annotations

import argparse
import json


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "models",
        help="list the models usable by name (--checkpoint NAME, Captioner.from_pretrained)",
        description=__doc__,
    )
    p.add_argument("--json", action="store_true", help="print one JSON object per model")


def run(args: argparse.Namespace) -> int:
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
