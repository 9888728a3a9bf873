"""Fixed sinusoidal position encodings: 1-D for caption tokens, 2-D for the encoder grid.

Sinusoids (Vaswani et al. 2017) need no maximum length, so incremental decoding can run to any length
and any grid size works without retraining a table. The 2-D encoding gives the first half of the
channels to the row index and the second half to the column index (as in DETR), so attention can tell
"top left" from "bottom right" even though the grid arrives flattened row-major as (B, L, D).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def sinusoidal_1d(positions: Tensor, dim: int, base: float = 10000.0) -> Tensor:
    """Encodings of integer ``positions`` (any shape S) -> (*S, dim): sin on even, cos on odd channels."""
    if dim % 2:
        raise ValueError(f"sinusoidal_1d: dim must be even, got {dim}")
    freqs = torch.exp(
        torch.arange(0, dim, 2, device=positions.device, dtype=torch.float32) * (-math.log(base) / dim)
    )  # (dim/2,)
    angles = positions.to(torch.float32).unsqueeze(-1) * freqs  # (*S, dim/2)
    # Interleave so channel 2i is sin and 2i+1 is cos of the same frequency.
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)  # (*S, dim/2, 2) -> (*S, dim)


def sinusoidal_2d(height: int, width: int, dim: int, device: torch.device | None = None) -> Tensor:
    """Encodings of a row-major ``height`` x ``width`` grid -> (height*width, dim)."""
    if dim % 4:
        raise ValueError(f"sinusoidal_2d: dim must be divisible by 4 (half rows, half columns), got {dim}")
    rows = torch.arange(height, device=device).repeat_interleave(width)  # (L,) 0,0,0,1,1,1,..
    cols = torch.arange(width, device=device).repeat(height)  # (L,) 0,1,2,0,1,2,..
    return torch.cat([sinusoidal_1d(rows, dim // 2), sinusoidal_1d(cols, dim // 2)], dim=-1)  # (L, dim)


def square_grid_side(num_locations: int) -> int:
    """The side g of a square grid with g*g = ``num_locations`` (every encoder pools to g x g)."""
    side = math.isqrt(num_locations)
    if side * side != num_locations:
        raise ValueError(
            f"grid position encoding needs a square grid, but the features have L={num_locations} "
            "locations (encoders pool to grid_size x grid_size, so L should be a square)"
        )
    return side


def alibi_slopes(num_heads: int, base: float = 8.0) -> Tensor:
    """Per-head slopes m_h = 2^(-base·h/H), h = 1..H (Press et al. 2022, "Train short, test long", §3,
    where base = 8): one head that reads mostly the last few tokens, one nearly blind to distance, and
    those between; a smaller base makes every head more local (base 4: 1/2 .. 1/16 for H = 4)."""
    if base <= 0:
        raise ValueError(f"alibi_slopes: base must be positive, got {base}")
    return torch.pow(2.0, -base * torch.arange(1, num_heads + 1, dtype=torch.float32) / num_heads)  # (H,)


def alibi_bias(
    num_heads: int, queries: int, start: int, device: torch.device | None = None, base: float = 8.0
) -> Tensor:
    """Additive self-attention bias -m_h·(i - j) for ``queries`` new positions i = start .. start+T-1 over
    keys j = 0 .. start+T-1, with -inf on future keys (causality) -> (H, T, start+T); m_h from
    ``alibi_slopes(num_heads, base)``."""
    i = torch.arange(start, start + queries, device=device)[:, None]  # (T, 1) absolute query positions
    j = torch.arange(start + queries, device=device)[None, :]  # (1, S) key positions
    distance = (i - j).to(torch.float32)  # (T, S), negative for future keys
    bias = -alibi_slopes(num_heads, base).to(device)[:, None, None] * distance  # (H, T, S)
    return bias.masked_fill(distance < 0, float("-inf"))
