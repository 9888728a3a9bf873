"""Decoding rows of the benchmark: greedy and batched beam search, and beam 5 against the per-image
reference (one image at a time over the reference LSTM, captions checked identical)."""

from __future__ import annotations

import time

import torch

from captioning.decoding import beam_search, greedy
from experiments.benchmarks.reference import ReferenceSoftLSTM, per_image_beam_search
from experiments.benchmarks.timing import timed

NO_END = -1  # no token has this id: every caption decodes the full length, so work is comparable


def decode(decoder, features: torch.Tensor, beam: int, length: int, bf16: bool = False):
    """Greedy (beam 1) or batched beam search to exactly ``length`` tokens."""
    with torch.autocast(features.device.type, dtype=torch.bfloat16, enabled=bf16):
        if beam == 1:
            return greedy(decoder, features, max_new_tokens=length, end_id=NO_END)
        return beam_search(decoder, features, num_beams=beam, max_new_tokens=length, end_id=NO_END)


def per_image_row(name: str, decoder, features: torch.Tensor, args, batched_seconds: float) -> dict:
    """Beam 5 one image at a time over the reference decoder (keys recomputed every step): the same
    algorithm, so the captions must be identical to the batched search's."""
    n, t, reference = args.per_image, args.length, ReferenceSoftLSTM(decoder)
    with torch.no_grad():
        ours = beam_search(decoder, features[:n], num_beams=5, max_new_tokens=t, end_id=NO_END)
    start = time.perf_counter()
    ref = per_image_beam_search(reference, features[:n], num_beams=5, max_new_tokens=t, end_id=NO_END)
    per_image = n / (time.perf_counter() - start)
    b = features.shape[0]
    return {
        "decoder": name,
        "what": "decode beam 5 (per-image reference)",
        "seconds": b / per_image,
        "images/s": per_image,
        "speed-up": (b / batched_seconds) / per_image,
        "identical": all(torch.equal(ours.tokens[i], r.tokens[0]) for i, r in enumerate(ref)),
    }


def bench_decode(name: str, decoder, args, device: torch.device) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    features = torch.randn(args.batch, args.grid**2, args.feature_dim, generator=g).to(device)  # (B, L, D)
    decoder.eval()
    rows = []
    for beam in (1, 3, 5):
        sec = timed(lambda k=beam: decode(decoder, features, k, args.length, args.bf16), args.repeats, device)
        rows.append(
            {"decoder": name, "what": f"decode beam {beam}", "seconds": sec, "images/s": args.batch / sec}
        )
        if beam == 5 and name == "soft":
            rows.append(per_image_row(name, decoder, features, args, sec))
    return rows
