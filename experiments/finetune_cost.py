"""The training step's cost with a frozen encoder against its last stages fine-tuned, on this machine.

    python scripts/finetune_cost.py --json docs/results/flickr8k/finetune_cost.json

Composes ``experiment=flickr8k_soft`` (frozen Lite1, the cached 7x7x1280 head grid is the model input) and
``experiment=flickr8k_finetune`` (the cached 7x7x192 activations before stage7 are the input; stage7 + head
run every step), builds each model for a vocabulary of Flickr8k's size, and times full training steps
(forward, backward, AdamW step) at batch 64 on random inputs of those shapes: frozen, fine-tuned with the
trained stages held (``UnfreezeEncoder`` before its epoch: no gradient through them), and released. The
inputs' values do not change the cost (the shapes are fixed); the data pipeline is not timed (a cached batch
is a memory-mapped slice). Medians of ``--steps`` after ``--warmup`` steps, one thread unless
``OMP_NUM_THREADS`` says otherwise; the three settings are interleaved ``--rounds`` times so a change of load
on the machine reaches all of them alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

from captioning.compose import compose_config
from captioning.data.vocab import SPECIALS, Vocab
from captioning.training.build import build_model

FLICKR8K_WORDS = 2538  # the vocabulary of min_word_count 5 on Flickr8k train (specials included)
STEPS_PER_EPOCH = 469  # 30,000 caption pairs / 64


def model(experiment: str, vocab: Vocab):
    cfg, _ = compose_config("train", [f"experiment={experiment}"])
    cfg.model.decoder.vocab_size = len(vocab)
    lit = build_model(cfg.model, vocab)
    net = lit.net.train()
    optimizer = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=1e-4)
    return net, optimizer


def step_seconds(
    net, optimizer, features: torch.Tensor, tokens: torch.Tensor, steps: int, warmup: int
) -> list[float]:
    times = []
    for i in range(warmup + steps):
        start = time.perf_counter()
        logits = net(tokens=tokens, features=features).logits  # (B, T, V)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=14, help="tokens per caption (Flickr8k's mean + 2)")
    parser.add_argument("--json", type=Path, help="write the measurement here")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    torch.manual_seed(0)
    vocab = Vocab(list(SPECIALS) + [f"w{i}" for i in range(FLICKR8K_WORDS - len(SPECIALS))])
    tokens = torch.randint(len(SPECIALS), len(vocab), (args.batch, args.length))
    frozen, finetuned = model("flickr8k_soft", vocab), model("flickr8k_finetune", vocab)
    grid = torch.randn(args.batch, 49, 1280)  # (B, L, D): the frozen head grid
    prefix = torch.randn(args.batch, 192, 7, 7)  # (B, C, h, w): the activations before stage7
    times: dict[str, list[float]] = {"frozen": [], "held": [], "released": []}
    for _ in range(args.rounds):
        times["frozen"] += step_seconds(*frozen, grid, tokens, args.steps, args.warmup)
        for name, held in (("held", True), ("released", False)):
            finetuned[0].encoder.hold(held)
            times[name] += step_seconds(*finetuned, prefix, tokens, args.steps, args.warmup)
    median = {name: statistics.median(values) for name, values in times.items()}
    result = {
        "command": "python scripts/finetune_cost.py " + (f"--json {args.json}" if args.json else ""),
        "threads": torch.get_num_threads(),
        "load_average": os.getloadavg()[0],
        "batch": args.batch,
        "caption_tokens": args.length,
        "vocabulary": len(vocab),
        "seconds_per_step_median": median,
        "seconds_per_step_all": times,
        "ratio_to_frozen": {name: median[name] / median["frozen"] for name in median},
        "minutes_per_epoch_of_469_steps": {name: median[name] * STEPS_PER_EPOCH / 60 for name in median},
    }
    print(
        json.dumps(
            {k: result[k] for k in ("seconds_per_step_median", "ratio_to_frozen", "load_average")}, indent=1
        )
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
