"""Attention overlays: one renderer for the CLI, W&B and notebooks.

Each generated word gets a panel: the image with the word's attention map upsampled over it. Soft maps
are upsampled smoothly (bicubic, as in Xu et al. Fig. 2); a one-hot map (hard attention) is upsampled
with nearest neighbour so the selected cell shows as a crisp square.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import matplotlib

if "MPLBACKEND" not in os.environ:  # Jupyter sets it (inline figures); elsewhere stay headless
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402


def upsample_attention(weights: np.ndarray, grid: tuple[int, int], size: tuple[int, int]) -> np.ndarray:
    """(H*W,) weights -> (height, width) map over the image, scaled to [0, 1]."""
    h, w = grid
    cell = np.asarray(weights, dtype=np.float32).reshape(h, w)  # (H*W,) -> (H, W)
    one_hot = np.isclose(cell.max(), 1.0) and np.isclose(cell.sum(), 1.0)
    resample = Image.Resampling.NEAREST if one_hot else Image.Resampling.BICUBIC
    up = np.asarray(Image.fromarray(cell, mode="F").resize(size, resample=resample))  # (height, width)
    up = up - up.min()
    return up / up.max() if up.max() > 0 else up


def attention_figure(
    image: Image.Image | np.ndarray,
    tokens: Sequence[str],
    attention: np.ndarray,
    grid: tuple[int, int],
    ncols: int = 5,
    panel_inches: float = 2.2,
) -> plt.Figure:
    """The image alone, then one panel per token with its (T, H*W) attention row overlaid."""
    img = np.asarray(image.convert("RGB") if isinstance(image, Image.Image) else image)
    attention = np.asarray(attention)
    if len(tokens) != attention.shape[0]:
        raise ValueError(f"{len(tokens)} tokens but {attention.shape[0]} attention rows")
    panels = len(tokens) + 1
    ncols = min(ncols, panels)
    nrows = math.ceil(panels / ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(ncols * panel_inches, nrows * panel_inches), squeeze=False
    )
    for ax in axes.flat:
        ax.axis("off")
    axes.flat[0].imshow(img)
    axes.flat[0].set_title("image", fontsize=10)
    size = (img.shape[1], img.shape[0])
    for ax, word, row in zip(axes.flat[1:], tokens, attention):
        ax.imshow(img)
        ax.imshow(upsample_attention(row, grid, size), cmap="gray", alpha=0.6, vmin=0.0, vmax=1.0)
        ax.set_title(word, fontsize=11)
    fig.tight_layout()
    return fig


def save_attention_figure(path: str | Path, *args, **kwargs) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = attention_figure(*args, **kwargs)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def figure_array(*args, **kwargs) -> np.ndarray:
    """The overlay figure as an (H, W, 3) uint8 array (for wandb.Image and notebooks)."""
    fig = attention_figure(*args, **kwargs)
    fig.canvas.draw()
    array = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
    plt.close(fig)
    return array
