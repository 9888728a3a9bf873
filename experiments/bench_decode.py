"""Decode throughput of the Transformer decoder with and without its KV cache.

    python scripts/bench_decode.py [--batch 32] [--length 20] [--beams 1 5] [--device cpu|cuda] [--bf16] [--threads N]

Builds the decoder of captioning/conf/model/decoder/transformer.yaml (random weights: throughput does not depend
on them) and decodes random encoder grids with greedy (beam 1) and beam search. <end> is disabled so
every caption runs the full ``--length`` steps, making the two paths do the same number of steps.
The uncached path recomputes the whole prefix (and the cross-attention keys/values) at every step.
Prints captions/s per (beam, cache) and the speed-up of the cache.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import hydra
import torch
from omegaconf import OmegaConf

from captioning.decoding import beam_search, greedy
from captioning.models.decoders.transformer import TransformerDecoder

CONFIG = (
    Path(__file__).resolve().parents[1] / "captioning" / "conf" / "model" / "decoder" / "transformer.yaml"
)
NO_END = -1  # an id no token has: decoding always runs to max_new_tokens


def build(vocab_size: int, feature_dim: int) -> TransformerDecoder:
    cfg = OmegaConf.load(CONFIG)
    cfg.vocab_size, cfg.feature_dim = vocab_size, feature_dim
    return hydra.utils.instantiate(cfg).eval()


def decode(decoder: TransformerDecoder, features: torch.Tensor, beam: int, length: int) -> None:
    if beam == 1:
        greedy(decoder, features, max_new_tokens=length, end_id=NO_END)
    else:
        beam_search(decoder, features, num_beams=beam, max_new_tokens=length, end_id=NO_END)


def captions_per_second(decoder, features, beam: int, length: int, repeats: int, bf16: bool) -> float:
    device = features.device
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        decode(decoder, features, beam, length)  # warm-up: kernel selection, allocator
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(repeats):
            decode(decoder, features, beam, length)
        if device.type == "cuda":
            torch.cuda.synchronize()
    return repeats * features.shape[0] / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=20)
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--grid", type=int, default=6, help="grid side: L = grid² locations")
    parser.add_argument("--feature-dim", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (GPU)")
    parser.add_argument(
        "--threads", type=int, default=0, help="CPU threads (0 = torch default); 1 on a busy machine"
    )
    args = parser.parse_args()
    if args.threads:
        # Small decode ops spread over threads that must wait for busy cores are slower, not faster.
        torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    device = torch.device(args.device)
    decoder = build(args.vocab, args.feature_dim).to(device)
    features = torch.randn(args.batch, args.grid**2, args.feature_dim, device=device)  # (B, L, F)
    n_params = sum(p.numel() for p in decoder.parameters())
    print(
        f"transformer decoder: {len(decoder.layers)} layers, D={decoder.embed_dim}, {n_params / 1e6:.2f}M params; "
        f"batch {args.batch}, length {args.length}, L={args.grid**2}, device {device}"
        f"{', bf16 autocast' if args.bf16 else ''}, torch threads {torch.get_num_threads()}"
    )
    print(f"{'beam':>4} | {'no cache (captions/s)':>22} | {'KV cache (captions/s)':>22} | {'speed-up':>8}")
    for beam in args.beams:
        rates = {}
        for use_cache in (False, True):
            decoder.use_cache = use_cache
            rates[use_cache] = captions_per_second(
                decoder, features, beam, args.length, args.repeats, args.bf16
            )
        print(
            f"{beam:>4} | {rates[False]:>22.1f} | {rates[True]:>22.1f} | {rates[True] / rates[False]:>7.2f}x"
        )


if __name__ == "__main__":
    main()
