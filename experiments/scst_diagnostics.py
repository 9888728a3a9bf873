"""What limits self-critical training: the reward a policy earns, measured the way SCST sees it.

    python scripts/scst_diagnostics.py --data flickr8k --num-images 1000 \\
        --out docs/results/flickr8k/scst_diagnostics \\
        xe=docs/models/flickr8k_soft_xe.safetensors scst=docs/models/flickr8k_soft_scst.safetensors

For every model and for the train and val splits (the same ``--num-images`` images of each: every k-th by
position), decodes the greedy caption and K sampled captions (temperature 1, SCST's cap of
``--max-new-tokens`` tokens: ``objective=scst``'s ``sample_max_new_tokens``) and reports, per split:
- the rewards: CIDEr-D (x100) of the greedy caption and of the samples against the image's references,
  document frequencies from the split's own references (the training reward on train, coco-caption's
  CIDEr-D on val), and the best of the K samples; train minus val is how much of the reward SCST climbs
  is the training images' own (overfitting);
- the learning signal: the mean over images of the within-image standard deviation of the K rewards (the
  leave-one-out advantages are these deviations: zero when an image's samples tie) and the share of
  images whose K samples all earn the same reward;
- length and ``<end>``: words per greedy caption, per sample and per reference, and the share of samples
  and greedy captions cut at the cap before their ``<end>`` (SCST scores a cut caption as cut);
- the policy's entropy: nats per sampled token of the word distribution (teacher-forced on the samples),
  the quantity that falls as sampling sharpens and the samples stop exploring.

Writes ``diagnostics.json`` and ``diagnostics.md`` to ``--out``. Features come from the frozen encoder's
cache (``--cache-dir``, default $CAPTIONING_CACHE) when the encoder is frozen, else from the images.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

from captioning.checkpoints.load import LoadedCheckpoint, load_checkpoint
from captioning.compose import compose_config
from captioning.data.tokenize import tokenize
from captioning.data.vocab import Vocab
from captioning.decoding import generate
from captioning.inference.evaluation import build_source, frozen_feature_cache, model_inputs
from captioning.metrics.cider import CiderD
from captioning.training.scst import cut_before_end, scst_reward, teacher_forced_inputs, word_entropy


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+", help="label=checkpoint (a .ckpt or an export)")
    p.add_argument("--data", default="flickr8k", help="data config (default: %(default)s)")
    p.add_argument("--num-images", type=int, default=1000, help="images per split (default: %(default)s)")
    p.add_argument("--num-samples", type=int, default=5, help="K samples per image (default: %(default)s)")
    p.add_argument("--max-new-tokens", type=int, default=16, help="SCST's cap (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=50)
    p.add_argument("--seed", type=int, default=0, help="the samples' generator seed")
    p.add_argument("--cache-dir", default=os.environ.get("CAPTIONING_CACHE"), help="feature cache folder")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--override", action="append", default=[], help="a Hydra override of the data config")
    return p.parse_args(argv)


def spread(n: int, count: int) -> list[int]:
    """``count`` positions spread evenly over 0..n-1 (all of them when count >= n)."""
    if count >= n:
        return list(range(n))
    return [int(i * n / count) for i in range(count)]


@torch.no_grad()
def diagnose(
    model: LoadedCheckpoint,
    source,
    reward: CiderD,
    positions: list[int],
    num_samples: int,
    max_new_tokens: int,
    batch_size: int = 50,
    cache_dir: str | None = None,
    seed: int = 0,
) -> dict:
    """Per-image arrays (greedy / sample rewards, lengths, cut flags, entropies) of ``positions`` of ``source``."""
    model.net.eval()
    cache = frozen_feature_cache(model, cache_dir)
    inputs = model_inputs(model, source, cache)  # image i -> its cached grid, or its pixels
    generator = torch.Generator().manual_seed(seed)
    k = num_samples
    out: dict[str, list] = {key: [] for key in (
        "greedy_reward", "sample_reward", "greedy_words", "greedy_cut", "sample_words", "sample_cut",
        "sample_entropy", "greedy_captions",
    )}  # fmt: skip
    for start in range(0, len(positions), batch_size):
        batch = positions[start : start + batch_size]
        rows = torch.stack([inputs(i) for i in batch])
        features = model.net.encode_features(rows) if cache else model.net.encode(rows)  # (B, L, D)
        greedy = generate(model.net.decoder, features, num_beams=1, max_new_tokens=max_new_tokens)
        sampled = generate(
            model.net.decoder, features, do_sample=True, num_return_sequences=k, temperature=1.0,
            max_new_tokens=max_new_tokens, generator=generator,
        )  # fmt: skip  # (B·K, T), an image's K samples adjacent
        for name, result, images in (("greedy", greedy, batch), ("sample", sampled, np.repeat(batch, k))):
            words = [model.vocab.decode(row.tolist()) for row in result.tokens]
            captions = [" ".join(w) for w in words]
            out[f"{name}_reward"].append(reward.scores(captions, [int(i) for i in images]) * 100)
            out[f"{name}_words"].append(np.array([len(w) for w in words]))
            out[f"{name}_cut"].append(cut_before_end(result.tokens).numpy())  # no <end> in the cap
            if name == "greedy":
                out["greedy_captions"].extend(captions)
        # The word distribution along each sample, teacher-forced (the pass SCST's gradient goes through).
        tokens = sampled.tokens
        logits = model.net.decoder(features.repeat_interleave(k, 0), teacher_forced_inputs(tokens)).logits
        entropy = word_entropy(torch.log_softmax(logits.float(), -1))  # (B·K, T) nats
        mask = (tokens != Vocab.pad_id).float()
        out["sample_entropy"].append(((entropy * mask).sum(1) / mask.sum(1).clamp_min(1)).numpy())
    arrays = {key: (np.concatenate(v) if key != "greedy_captions" else v) for key, v in out.items()}
    arrays["sample_reward"] = arrays["sample_reward"].reshape(len(positions), k)  # (N, K)
    arrays["reference_words"] = np.array(
        [np.mean([len(tokenize(c)) for c in source.captions(i)]) for i in positions]
    )
    return arrays


def summary(a: dict) -> dict:
    samples = a["sample_reward"]  # (N, K)
    return {
        "images": int(len(a["greedy_reward"])),
        "greedy_reward": float(a["greedy_reward"].mean()),
        "sample_reward": float(samples.mean()),
        "best_of_k_reward": float(samples.max(1).mean()),
        "greedy_minus_sample": float(a["greedy_reward"].mean() - samples.mean()),
        "within_image_reward_std": float(samples.std(1, ddof=1).mean()),
        "images_with_tied_samples": float((samples.max(1) - samples.min(1) < 1e-9).mean()),
        "greedy_words": float(a["greedy_words"].mean()),
        "sample_words": float(a["sample_words"].mean()),
        "reference_words": float(a["reference_words"].mean()),
        "greedy_cut_share": float(a["greedy_cut"].mean()),
        "sample_cut_share": float(a["sample_cut"].mean()),
        "sample_token_entropy": float(a["sample_entropy"].mean()),
    }


ROWS = (
    ("greedy_reward", "greedy CIDEr-D", "{:.1f}"),
    ("sample_reward", "sample CIDEr-D (mean of K)", "{:.1f}"),
    ("best_of_k_reward", "best of K samples", "{:.1f}"),
    ("greedy_minus_sample", "greedy − sample", "{:+.1f}"),
    ("within_image_reward_std", "within-image std of the K rewards", "{:.1f}"),
    ("images_with_tied_samples", "images whose K samples tie", "{:.3f}"),
    ("greedy_words", "words per greedy caption", "{:.2f}"),
    ("sample_words", "words per sample", "{:.2f}"),
    ("reference_words", "words per reference", "{:.2f}"),
    ("greedy_cut_share", "greedy captions cut at the cap", "{:.3f}"),
    ("sample_cut_share", "samples cut at the cap", "{:.3f}"),
    ("sample_token_entropy", "word entropy per sampled token (nats)", "{:.2f}"),
)


def markdown(report: dict, command: str) -> str:
    cols = [(label, split) for label in report["models"] for split in ("train", "val")]
    lines = [
        "# SCST diagnostics",
        "",
        f"`{command}`",
        "",
        f"K = {report['num_samples']} samples at temperature 1, cap {report['max_new_tokens']} tokens, "
        f"{report['num_images']} images per split; rewards are CIDEr-D x100 with each split's own "
        "document frequencies.",
        "",
        "| | " + " | ".join(f"{label} {split}" for label, split in cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for key, name, fmt in ROWS:
        values = [fmt.format(report["models"][label][split][key]) for label, split in cols]
        lines.append(f"| {name} | " + " | ".join(values) + " |")
    lines.append("")
    for label in report["models"]:
        gap = (
            report["models"][label]["train"]["greedy_reward"]
            - report["models"][label]["val"]["greedy_reward"]
        )
        lines.append(f"- {label}: greedy reward train − val = {gap:+.1f}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    models = {}
    for spec in args.models:
        label, sep, path = spec.partition("=")
        if not sep or not label or not path:
            print(f"error: {spec!r}: expected label=checkpoint", file=sys.stderr)
            return 2
        models[label] = load_checkpoint(path)
    cfg, _ = compose_config("eval", [f"data={args.data}", *args.override])
    data_cfg = cfg.data
    report: dict = {
        "num_images": args.num_images,
        "num_samples": args.num_samples,
        "max_new_tokens": args.max_new_tokens,
        "seed": args.seed,
        "models": {label: {} for label in models},
    }
    for split in ("train", "val"):
        source = build_source(data_cfg, split)
        reward = scst_reward(source)  # the split's own document frequencies
        positions = spread(len(source), args.num_images)
        for label, model in models.items():
            arrays = diagnose(
                model, source, reward, positions, args.num_samples, args.max_new_tokens,
                args.batch_size, args.cache_dir, args.seed,
            )  # fmt: skip
            report["models"][label][split] = summary(arrays)
            print(
                f"{label} {split}: "
                + json.dumps({k: round(v, 3) for k, v in report["models"][label][split].items()})
            )
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python scripts/scst_diagnostics.py " + " ".join(argv if argv is not None else sys.argv[1:])
    (args.out / "diagnostics.json").write_text(json.dumps({**report, "command": command}, indent=1) + "\n")
    (args.out / "diagnostics.md").write_text(markdown(report, command))
    print(f"wrote {args.out / 'diagnostics.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
