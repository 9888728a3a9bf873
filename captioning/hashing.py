"""What identifies an encoder and its weights: SHA-256 hashes of tensors, shared by the feature cache
(captioning/data/features.py), checkpoint loading, exports and ensembles."""

from __future__ import annotations

import hashlib

import torch
from torch import nn


def encoder_identity(encoder: nn.Module, image_size: int, weights_sha256: str | None = None) -> dict:
    """Everything an encoder's grid depends on: class, module structure (``repr``: every layer's shape and
    stride), grid size, output width, weights (SHA-256 of the state dict; pass it when already known), input
    size and normalisation. Two encoders with equal identities give the same grid for the same image."""
    return {
        "encoder": f"{type(encoder).__module__}.{type(encoder).__qualname__}",
        "structure": repr(encoder),
        "grid_size": int(encoder.grid_size),
        "out_dim": int(encoder.out_dim),
        "weights_sha256": weights_sha256 or state_dict_hash(encoder),
        "image_size": int(image_size),
        "mean": [float(v) for v in encoder.mean],
        "std": [float(v) for v in encoder.std],
    }


def state_dict_hash(module: nn.Module) -> str:
    """SHA-256 over every parameter and buffer (name, dtype, shape, bytes), in a fixed order."""
    return tensors_hash(module.state_dict())


def tensors_hash(tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 over named tensors (name, dtype, shape, bytes), in a fixed order."""
    digest = hashlib.sha256()
    for name, tensor in sorted(tensors.items()):
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())  # raw bytes: exact, any dtype
    return digest.hexdigest()
