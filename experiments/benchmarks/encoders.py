"""Encoder rows of the benchmark: images/s of each CNN at 224 px (random weights: speed only; under bf16
autocast with ``--bf16`` on a GPU)."""

from __future__ import annotations

import torch

from experiments.benchmarks.timing import timed


def bench_encoders(args, device: torch.device) -> list[dict]:
    from captioning.models.encoders import EfficientNetLiteEncoder, TorchvisionEncoder

    encoders = {
        "efficientnet_lite0 (stride16)": lambda: EfficientNetLiteEncoder(pretrained=False, grid_size=14)
    }
    if not args.quick:
        encoders["resnet101"] = lambda: TorchvisionEncoder("resnet101", pretrained=False, grid_size=14)
    rows = []
    images = torch.rand(args.encoder_batch, 3, 224, 224, device=device)
    # bf16 convolutions on a GPU (--bf16); a CPU without bf16 units would only measure their emulation.
    bf16 = bool(getattr(args, "bf16", False)) and device.type == "cuda"
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)
    for name, make in encoders.items():
        enc = make().to(device).eval()
        with torch.no_grad(), autocast:
            sec = timed(lambda e=enc: e(images), repeats=3, device=device)
        rows.append(
            {
                "decoder": "-",
                "what": f"encoder {name} @224{' bf16' if bf16 else ''}",
                "seconds": sec,
                "images/s": len(images) / sec,
            }  # fmt: skip
        )
    return rows
