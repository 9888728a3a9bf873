"""``captioning evaluate --checkpoint CKPT [--checkpoint CKPT ...] [--out-dir DIR] [--num-beams 5] [data=flickr8k] [split=test] [rerank=consensus] ...``

Decodes a split with a trained checkpoint, writes the COCO results file and a scores JSON, and prints
BLEU-1..4, METEOR, ROUGE-L and CIDEr-D from pycocoevalcap (the toolkit's scale: 0-1, CIDEr-D 0-10) with the decoding settings, SPICE
when it can run (else why not), NLTK BLEU as a cross-check and, on synthetic scenes, attention grounding.
Overrides compose captioning/conf/eval.yaml (its data group is captioning/conf/data/*, as in training).
Without data=, the data is the checkpoint's: the data config its provenance records (every training
checkpoint and its export records it), a zoo model's as the zoo lists it, or synthetic scenes for an older
checkpoint whose every word is a synthetic-scene word; any other checkpoint is refused
until data= names its data (never scored on scenes it was not trained on). A synthetic-scene model scored
on photos gets a note. ``rerank=consensus``
keeps, among each checkpoint's beams and samples, the caption a CIDEr-D vote prefers (captioning/conf/rerank/
consensus.yaml; the memory of nearest images is built from the data's training split). Decoding options are
``caption``'s flags (``--num-beams 5 --length-penalty 0.5``) or the same Hydra overrides (``decoding.num_beams=5``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from captioning.cli.arguments import ENSEMBLE_HELP, add_checkpoints, path_arg
from captioning.cli.decoding_flags import add_decoding_arguments, merge_into_overrides

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from captioning.inference.evaluation import Evaluation


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "evaluate",
        help="decode a data split with a checkpoint and score it (coco-caption metrics: 0-1, CIDEr-D 0-10)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_checkpoints(
        parser,
        f"a .ckpt of captioning-train or a .safetensors export; {ENSEMBLE_HELP}",
    )
    parser.add_argument(
        "--out-dir",
        type=path_arg,
        default=None,
        help="where results.json and scores.json go (default: "
        "outputs/evaluate/<checkpoint stem>/<data>-<split>-beam<K>-<8 hex digits of the checkpoints' paths "
        "and every setting>)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the sampler with decoding.do_sample=true (default 0; recorded in scores.json): the same "
        "seed, the same captions",
    )
    parser.add_argument(
        "overrides", nargs="*", help="Hydra overrides of captioning/conf/eval.yaml, e.g. data=flickr8k"
    )
    add_decoding_arguments(parser, seed=False, overrides=True)
    return parser


def check_args(args: argparse.Namespace) -> str | None:
    """Before anything heavy: the decoding flags become decoding.* overrides (one line if they disagree)."""
    return merge_into_overrides(args)


def default_out_dir(checkpoints: list[Path], data: str, cfg: DictConfig, evaluation: Evaluation) -> Path:
    """Under outputs/ (never beside the checkpoint, which may be read-only or shared); an ensemble's
    folder joins its members' stems with '+'. The name ends with 8 hex digits of what the results depend
    on (the checkpoints' resolved paths; the evaluated split's source as composed, its folder and
    ``num_images`` included; the split and tokenizer; every decoding and reranking setting; the seed): two
    runs' last.ckpt, one checkpoint at two length penalties, or one split of two copies of a dataset never
    share a folder, while the same evaluation again (whatever its workers or batch size) writes where it
    wrote before."""
    from omegaconf import OmegaConf

    from captioning.checkpoints.ensemble import members_stem

    node = cfg.data.get(cfg.split)
    try:  # the evaluated split's source as it resolves (its folder, num_images), not the other splits'
        source = OmegaConf.to_container(node, resolve=True) if node is not None else None
    except Exception:  # noqa: BLE001 - an interpolation of this split that does not resolve: as written
        source = OmegaConf.to_container(node, resolve=False)
    what = {
        "checkpoints": [str(Path(c).resolve()) for c in checkpoints],
        "data": {"source": source, "on_bad_image": cfg.data.get("on_bad_image")},
        "split": cfg.split,
        "tokenizer": cfg.get("tokenizer"),
        "decoding": evaluation.decoding,
        "rerank": evaluation.rerank,
        "seed": evaluation.seed,
    }
    digest = hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:8]
    name = f"{data}-{cfg.split}-beam{evaluation.decoding['num_beams']}-{digest}"
    return Path("outputs") / "evaluate" / members_stem(checkpoints) / name


def run(args: argparse.Namespace) -> int:
    # Imported here so `captioning caption` and `captioning score` do not pay for Hydra composition.
    from captioning.api import run_evaluation
    from captioning.errors import one_line, user_errors
    from captioning.inference.evaluation import format_evaluation, write_evaluation

    try:  # the work captioning.evaluate does too (captioning/api.py)
        evaluation, cfg, data_name = run_evaluation(args.checkpoint, args.overrides, args.out_dir, args.seed)
    except (*user_errors(), ValueError, RuntimeError) as err:  # e.g. a decoding value a check refused
        print(f"captioning evaluate: error: {one_line(err)}", file=sys.stderr)
        return 2
    out_dir = args.out_dir or default_out_dir(args.checkpoint, data_name, cfg, evaluation)
    # The scores first: a bad --out-dir loses none of them.
    print(format_evaluation(evaluation, out_dir / "results.json"))
    for line in evaluation.decoded.skipped:  # unreadable images were left out of the scores
        print(f"captioning evaluate: skipped {line}", file=sys.stderr)
    for line in evaluation.notes:  # e.g. a synthetic-scene model scored on photos
        print(f"captioning evaluate: note: {line}", file=sys.stderr)
    try:  # atomic writes (captioning/writes.py); the default folder is checked here, --out-dir up front
        results_path, scores_path = write_evaluation(evaluation, out_dir, args.checkpoint)
    except (OSError, ValueError) as err:  # the writer names the file and why (ValueError: OutputError of
        print(f"captioning evaluate: error: {one_line(err)}", file=sys.stderr)  # the default folder)
        return 1
    print(f"wrote {results_path} and {scores_path}")
    if evaluation.decoded.skipped:
        n = len(evaluation.decoded.skipped)
        print(f"captioning evaluate: {n} images could not be read and are not scored", file=sys.stderr)
        return 1
    return 0
