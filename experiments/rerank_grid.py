"""Consensus reranking's neighbours and weight, chosen on one half of a dev split and checked on the other.

    python scripts/rerank_grid.py --checkpoint A [--checkpoint B ...] [--out grid.json] [data=flickr8k split=val]

The candidates (each member's beams and samples, ``captioning.inference.consensus``) are decoded once,
in the batches and with the seed ``captioning evaluate rerank=consensus`` uses, so each row's captions
are the ones evaluate would write at that setting; every (neighbours, weight) then only votes again.
Scores are the toolkit-free CIDEr-D of ``captioning.inference.tuning`` (project tokenizer) on the whole
split and on its even / odd halves; ``held_out`` chooses on one half and reports the other, against
minimum Bayes risk alone (neighbours 0). ``by_likeness`` splits the images into quarters by their mean
cosine to the 30 nearest bank images and gives, per quarter, the mean CIDEr-D (whole-split document
frequencies) of the first member's top beam, of minimum Bayes risk alone and of the default setting: how
the vote fares on the photos least like the training set.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
import torch

from captioning.checkpoints.ensemble import load_checkpoints
from captioning.compose import compose_config
from captioning.data.tokenize import tokenize
from captioning.decoding import GenerationConfig
from captioning.inference.consensus import ConsensusReranker, RerankConfig
from captioning.inference.evaluation import (
    build_caption_bank,
    build_source,
    frozen_feature_cache,
    model_inputs,
)
from captioning.inference.tuning import SplitScorer, held_out, score_setting
from captioning.metrics.cider import CiderD


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoint", action="append", required=True)
    parser.add_argument("--neighbours", type=int, nargs="+", default=[5, 15, 30, 60])
    parser.add_argument("--weights", type=float, nargs="+", default=[1, 2, 4, 8, 12, 16, 24, 32])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("overrides", nargs="*", default=[])
    args = parser.parse_args()
    cfg, _ = compose_config("eval", ["data=flickr8k", "split=val", *args.overrides])
    source, train = build_source(cfg.data, cfg.split), build_source(cfg.data, "train")
    model = load_checkpoints(args.checkpoint)
    cache = frozen_feature_cache(model, cfg.paths.cache if cfg.feature_cache else None)
    bank = build_caption_bank(model, train, cache)
    reranker = ConsensusReranker(RerankConfig(), bank)
    decoding = GenerationConfig.from_dict(model.decoding)
    inputs = model_inputs(model, source, cache)
    batches = []  # (indices, grids, candidates): decoded once
    likeness = []  # per image: mean cosine to its 30 nearest bank images
    with torch.no_grad():
        for start in range(0, len(source), cfg.batch_size):
            indices = list(range(start, min(start + cfg.batch_size, len(source))))
            key = "images" if cache is None else "features"
            grids = model.net.encode_batch({key: torch.stack([inputs(i) for i in indices])})  # (B, L, D)
            batches.append(
                (indices, grids, reranker.candidates(model.net.decoder, grids, model.vocab, decoding))
            )
            likeness += bank.cosines(grids).topk(min(30, len(bank)), dim=-1).values.mean(-1).tolist()
    scorer, rows, chosen = SplitScorer(source), [], {}
    for k in [0, *args.neighbours]:
        reranker.config = dataclasses.replace(reranker.config, neighbours=k)
        votes = [
            (indices, reranker.votes(options, grids, [source.image_id(i) for i in indices]))
            for indices, grids, options in batches
        ]
        for weight in [0.0] if k == 0 else args.weights:
            captions = {
                i: unique[int(np.argmax(own + weight * near))]
                for indices, image_votes in votes
                for i, (unique, own, near) in zip(indices, image_votes)
            }
            rows.append(score_setting({"neighbours": k, "weight": weight}, captions, scorer))
            chosen[(k, weight)] = captions
            print(json.dumps(rows[-1].to_dict()), flush=True)
    report = {
        "checkpoints": args.checkpoint,
        "decoding": decoding.to_dict(),
        "candidates": {
            k: v for k, v in RerankConfig().to_dict().items() if k not in ("neighbours", "weight")
        },
        "rows": [r.to_dict() for r in rows],
        "held_out": held_out(rows, {"neighbours": 0, "weight": 0.0}),
        "by_likeness": by_likeness(source, batches, likeness, chosen),
    }
    print(json.dumps(report["by_likeness"], indent=1))
    print(json.dumps(report["held_out"], indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


def by_likeness(source, batches, likeness: list[float], chosen: dict) -> list[dict]:
    """Per quarter of the images by likeness to the bank: mean per-image CIDEr-D of three decodings."""
    refs = [[" ".join(tokenize(c)) for c in source.captions(i)] for i in range(len(source))]
    cider = CiderD(refs)
    top_beam = {
        i: " ".join(options[b][0].words) for indices, _, options in batches for b, i in enumerate(indices)
    }
    default = RerankConfig()
    decodings = {"top_beam": top_beam, "mbr_alone": chosen[(0, 0.0)]}
    if (default.neighbours, default.weight) in chosen:  # the default setting, when the grid holds it
        decodings["consensus"] = chosen[(default.neighbours, default.weight)]
    scores = {
        name: cider.scores([caps[i] for i in range(len(source))], range(len(source)))
        for name, caps in decodings.items()
    }
    quarters = np.array_split(np.argsort(likeness), 4)  # least alike first
    return [
        {
            "images": len(q),
            "mean_cosine": float(np.mean([likeness[i] for i in q])),
            **{name: float(s[q].mean()) for name, s in scores.items()},
        }
        for q in quarters
    ]


if __name__ == "__main__":
    main()
