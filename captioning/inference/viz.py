"""Attention overlays: one renderer for the CLI, the Python API, the demo page, W&B and notebooks.

One panel per generated word: the photo, with the word's attention map laid over it in a colour map
whose opacity grows with the weight, so the photo stays visible where the model does not look. All
panels of a caption share **one colour scale** (0 to the caption's largest weight, drawn as a colour bar
with its values), so near-uniform attention looks near-uniform; ``scale="word"`` scales every panel to
its own maximum instead, and the figure says so. Soft maps are upsampled smoothly (bicubic, as in Xu et
al. Fig. 2); a one-hot map (hard attention) with nearest neighbour, so the chosen cell is a crisp square.
The title is the full caption and its score. Drawn with numpy and Pillow (no matplotlib figure): about
20 ms per overlay on a CPU (``make bench``, row "overlay").
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

SCALES = ("caption", "word")
BAR_H = 48  # colour bar: the ramp, its values, the label
# Perceptually uniform, dark-to-bright (matplotlib's "inferno"), sampled at 9 stops and interpolated.
_STOPS = np.array(
    [[0, 0, 4], [31, 12, 72], [85, 15, 109], [136, 34, 106], [186, 54, 85],
     [227, 89, 51], [249, 140, 10], [249, 201, 50], [252, 255, 164]], dtype=np.float32,
)  # fmt: skip
LUT = np.stack(
    [np.interp(np.linspace(0, 8, 256), np.arange(9), _STOPS[:, c]) for c in range(3)], 1
)  # (256, 3)


@lru_cache(maxsize=8)
def _font(size: int) -> ImageFont.ImageFont:
    try:
        return ImageFont.load_default(size=size)  # Pillow's bundled scalable font
    except (TypeError, OSError):  # Pillow without FreeType: the fixed bitmap font
        return ImageFont.load_default()


def is_one_hot(weights: np.ndarray) -> bool:
    return bool(np.isclose(weights.max(), 1.0) and np.isclose(weights.sum(), 1.0))


def upsample_attention(weights: np.ndarray, grid: tuple[int, int], size: tuple[int, int]) -> np.ndarray:
    """(H*W,) weights -> (height, width) map over the image in the weights' own units (not rescaled):
    bicubic for soft maps (clipped at 0), nearest neighbour for one-hot (hard attention) rows."""
    h, w = grid
    cell = np.asarray(weights, dtype=np.float32).reshape(h, w)  # (H*W,) -> (H, W)
    resample = Image.Resampling.NEAREST if is_one_hot(cell) else Image.Resampling.BICUBIC
    return np.clip(np.asarray(Image.fromarray(cell, mode="F").resize(size, resample=resample)), 0.0, None)


def _blend(photo: np.ndarray, heat: np.ndarray) -> np.ndarray:
    """photo (h, w, 3) float, heat (h, w) in [0, 1] -> the photo under the colour map, opacity 0.15..0.75."""
    colour = LUT[np.clip((heat * 255).astype(np.int32), 0, 255)]  # (h, w, 3)
    alpha = (0.15 + 0.6 * heat)[..., None]  # (h, w, 1): the photo shows through low weights
    return photo * (1 - alpha) + colour * alpha


def _colour_bar(width: int, vmax: float, label: str, font, uniform: float | None = None) -> Image.Image:
    """The colour scale from 0 to ``vmax``, with a tick at the uniform weight 1/L when it is on the scale."""
    bar = Image.new("RGB", (width, BAR_H), "white")
    ramp = LUT[np.linspace(0, 255, width - 20).astype(int)].astype(np.uint8)  # (W', 3)
    bar.paste(Image.fromarray(np.repeat(ramp[None], 10, 0)), (10, 2))
    draw = ImageDraw.Draw(bar)
    right = f"{vmax:.3g}"
    right_x = width - 10 - draw.textlength(right, font=font)
    if uniform is not None and 0 < uniform < vmax:
        x = 10 + (width - 20) * uniform / vmax
        draw.line([(x, 0), (x, 13)], fill="white", width=2)
        text = f"uniform {uniform:.3g}"
        if x + 3 + draw.textlength(text, font=font) < right_x - 6:  # else the tick alone
            draw.text((x + 3, 14), text, fill="gray", font=font)
    draw.text((10, 14), "0", fill="black", font=font)
    draw.text((right_x, 14), right, fill="black", font=font)
    draw.text(((width - draw.textlength(label, font=font)) / 2, 30), label, fill="black", font=font)
    return bar


def render_overlay(
    image: Image.Image | np.ndarray,
    tokens: Sequence[str],
    attention: np.ndarray,
    grid: tuple[int, int],
    caption: str | None = None,
    score: float | None = None,
    scale: str = "caption",
    ncols: int = 5,
    panel: int = 160,
    panels: int | None = None,
    vmax: float | None = None,
    subtitle: str | None = None,
) -> Image.Image:
    """The image, then one panel per token with its (T, H*W) attention row, a title and a colour bar.

    ``subtitle``: a line under the title saying what the map is (a decoder's ``attention_map_label``, e.g.
    a Transformer's "cross-attention of layer 2 of 2, mean over 4 heads"). ``panels``: lay out this many panels whatever the caption's length (fixed-size images, e.g. a W&B
    table column); tokens beyond it are left out. ``vmax``: the top of the shared colour scale (default:
    the largest weight shown), e.g. a whole caption's when one word is drawn alone."""
    if scale not in SCALES:
        raise ValueError(f"scale={scale!r}: expected one of {SCALES}")
    photo_img = image.convert("RGB") if isinstance(image, Image.Image) else Image.fromarray(np.asarray(image))
    if len(tokens) != len(attention):
        raise ValueError(f"{len(tokens)} tokens but {len(attention)} attention rows")
    attention = np.asarray(attention, dtype=np.float32).reshape(len(tokens), grid[0] * grid[1])  # (T, H*W)
    n = panels if panels is not None else len(tokens) + 1
    tokens, attention = list(tokens)[: n - 1], attention[: n - 1]
    cols = max(1, min(ncols, n))
    rows = -(-n // cols)
    photo_img = photo_img.resize((panel, panel), Image.Resampling.BILINEAR)
    photo = np.asarray(photo_img, dtype=np.float32)  # (panel, panel, 3)
    font, title_font = _font(13), _font(14)
    title_h, label_h, bar_h = (44 if subtitle else 26), 18, BAR_H
    out = Image.new("RGB", (cols * panel, title_h + rows * (panel + label_h) + bar_h), "white")
    draw = ImageDraw.Draw(out)
    title = caption if caption is not None else " ".join(tokens)
    if score is not None:
        title = f"{title}   (score {score:.3f})"
    draw.text((6, 5), title, fill="black", font=title_font)
    if subtitle:
        draw.text((6, 24), subtitle, fill=(90, 90, 90), font=font)
    if vmax is None:
        vmax = float(attention.max()) if attention.size else 1.0
    for k in range(n):
        x, y = (k % cols) * panel, title_h + (k // cols) * (panel + label_h)
        if k == 0:
            out.paste(photo_img, (x, y + label_h))
            draw.text((x + 4, y + 2), "image", fill="black", font=font)
            continue
        if k - 1 >= len(tokens):
            continue
        row = attention[k - 1]
        top = (float(row.max()) if scale == "word" else vmax) or 1.0
        heat = upsample_attention(row, grid, (panel, panel)) / top  # (panel, panel) in [0, 1]
        panel_img = Image.fromarray(np.clip(_blend(photo, np.clip(heat, 0, 1)), 0, 255).astype(np.uint8))
        out.paste(panel_img, (x, y + label_h))
        word = tokens[k - 1] + (f"  max {row.max():.2f}" if scale == "word" else "")
        draw.text((x + 4, y + 2), word, fill="black", font=font)
    label = (
        "attention weight (one scale for all words)"
        if scale == "caption"
        else "each word scaled to its own max"
    )
    uniform = 1.0 / attention.shape[1] if scale == "caption" else None
    bar = _colour_bar(out.width, vmax if scale == "caption" else 1.0, label, font, uniform)
    out.paste(bar, (0, out.height - bar_h))
    return out


def save_attention_figure(path: str | Path, *args, **kwargs) -> Path:
    """``render_overlay(*args, **kwargs)`` written to ``path`` (its suffix names the format) through
    ``captioning.writes``: never over a model file or a device, whole or not at all."""
    from captioning.writes import output

    out = output(path, "the attention figure")
    picture = render_overlay(*args, **kwargs)
    with out.replacing() as temp:  # the temp file keeps the suffix PIL picks the format by
        picture.save(temp)
    return out.path


def figure_array(*args, **kwargs) -> np.ndarray:
    """The overlay as an (H, W, 3) uint8 array (for wandb.Image)."""
    return np.asarray(render_overlay(*args, **kwargs))
