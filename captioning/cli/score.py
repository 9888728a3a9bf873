"""`captioning score`: the official COCO caption metrics for a results file, as a table and JSON.

captioning score RESULTS.json --references captions_val2014.json [--tokenizer ptb|simple|none]
                 [--metrics Bleu_4 CIDEr ...] [--out scores.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from captioning.cli.arguments import path_arg
from captioning.metrics.names import METRICS, TOKENIZERS


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``score`` sub-command."""
    parser = subparsers.add_parser(
        "score",
        help="BLEU/METEOR/ROUGE-L/CIDEr/SPICE of a COCO results file (0-1; CIDEr-D 0-10)",
        description="Score [{image_id, caption}] results against COCO caption annotations with the "
        "official toolkit (pycocoevalcap). Only the images in the results file are scored, as in the "
        "official demo. Scores are on the toolkit's scale: 0-1, CIDEr-D 0-10.",
    )
    parser.add_argument("results", type=Path, help="results JSON: [{image_id, caption}, ...]")
    parser.add_argument(
        "--references", type=Path, required=True, help="COCO captions annotations, e.g. captions_val2014.json"
    )
    parser.add_argument(
        "--tokenizer",
        choices=TOKENIZERS,
        default="ptb",
        help="ptb: the toolkit's Java PTB tokenizer (official numbers); simple: the training tokenizer; "
        "none: captions are already tokenised (default: ptb)",
    )
    parser.add_argument(
        "--metrics",
        nargs="+",
        choices=METRICS,
        default=list(METRICS),
        metavar="METRIC",
        help=f"the metrics to compute, of {', '.join(METRICS)} (default: all)",
    )
    parser.add_argument(
        "--out",
        type=path_arg,
        default=None,
        help="also write the scores to this JSON file (never an input, a checkpoint or a device)",
    )
    return parser


def run(args: argparse.Namespace) -> int:
    """Score ``args.results``; print the table, write ``args.out`` if given. Returns the exit status."""
    from captioning.metrics.coco import evaluate_results, load_coco_references, load_results
    from captioning.metrics.report import format_report
    from captioning.writes import OutputError, output

    try:  # --out checked before scoring (the PTB tokenizer and SPICE take minutes): captioning/writes.py
        out = None
        if args.out is not None:
            out = output(
                args.out,
                "the scores (JSON)",
                flag="--out",
                inputs={
                    args.results: "an input file (the results being scored)",
                    args.references: "an input file (--references)",
                },
                check_folder=False,  # an unwritable folder fails after the table: no score is lost
            )
    except OutputError as err:
        print(f"captioning score: error: {err}", file=sys.stderr)
        return 2
    try:
        references = load_coco_references(args.references)
        results = load_results(args.results, references)
        report = evaluate_results(results, references, metrics=args.metrics, tokenizer=args.tokenizer)
    except (FileNotFoundError, ValueError, RuntimeError) as err:
        print(f"captioning score: error: {err}", file=sys.stderr)
        return 2
    print(format_report(report, args.results, args.references))
    if not report.scores:  # every asked metric skipped (e.g. SPICE without its jars): nothing was scored
        print(f"captioning score: error: no metric could be computed: {report.skipped}", file=sys.stderr)
        return 2
    if out is not None:  # after the table: an unwritable --out loses no score
        payload = {**report.to_dict(), "results": str(args.results), "references": str(args.references)}
        try:
            out.write_text(json.dumps(payload, indent=2) + "\n")  # no empty file if it fails
        except (OSError, OutputError) as err:
            print(f"captioning score: error: {err}", file=sys.stderr)
            return 1
        print(f"wrote {args.out}")
    return 0
