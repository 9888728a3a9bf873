"""Encoder rows of the benchmark: images/s of each CNN at 224 px (random weights: speed only)."""

from __future__ import annotations

import torch

from captioning.benchmarks.timing import timed


def bench_encoders(args, device: torch.device) -> list[dict]:
    from captioning.models.encoders import EfficientNetLiteEncoder, TorchvisionEncoder

    encoders = {
        "efficientnet_lite0 (stride16)": lambda: EfficientNetLiteEncoder(pretrained=False, grid_size=14)
    }
    if not args.quick:
        encoders["resnet101"] = lambda: TorchvisionEncoder("resnet101", pretrained=False, grid_size=14)
    rows = []
    images = torch.rand(args.encoder_batch, 3, 224, 224, device=device)
    for name, make in encoders.items():
        enc = make().to(device).eval()
        with torch.no_grad():
            sec = timed(lambda e=enc: e(images), repeats=3, device=device)
        rows.append(
            {"decoder": "-", "what": f"encoder {name} @224", "seconds": sec, "images/s": len(images) / sec}
        )
    return rows
