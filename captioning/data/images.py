"""Image loading that fails clearly: every error names the file and what was wrong.

The pixel limit is checked from the header, before any pixel is decoded, so a tiny file that claims
20000×20000 pixels is refused without allocating its 1.2 GB.
"""

from __future__ import annotations

import logging
import struct
from pathlib import Path

from PIL import Image, ImageOps

_log = logging.getLogger(__name__)

# Refuse decompression bombs before allocating: 20000×20000 RGB would be 1.2 GB.
MAX_PIXELS = 40_000_000

# What Pillow's decoders raise on corrupt or truncated bytes (struct/index/key/type errors come from
# malformed headers and metadata blocks deep inside the format plugins).
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, struct.error, IndexError, KeyError, TypeError)


class ImageError(ValueError):
    """An image file that cannot be used, with its path and the reason."""


def _upright(img: Image.Image, path: Path) -> Image.Image:
    """Apply the EXIF orientation; broken EXIF metadata leaves the (readable) pixels as stored."""
    try:
        return ImageOps.exif_transpose(img)
    except _DECODE_ERRORS as err:
        _log.warning("%s: unreadable EXIF metadata, orientation not applied (%s)", path, err)
        return img


def load_rgb(path: str | Path, max_pixels: int = MAX_PIXELS) -> Image.Image:
    """Open ``path`` as an upright RGB image (EXIF rotation applied; gray, palette, RGBA, CMYK converted).

    Raises :class:`ImageError` naming the file for a missing, empty, unreadable, truncated or too large image.
    """
    path = Path(path)
    if path.is_dir():
        raise ImageError(f"{path}: is a folder, not an image file")
    if not path.is_file():
        raise ImageError(f"{path}: no such image file")
    if path.stat().st_size == 0:
        raise ImageError(f"{path}: the file is empty (0 bytes)")
    try:
        with Image.open(path) as img:  # reads the header only; pixels are decoded on first use
            if img.width * img.height > max_pixels:
                raise ImageError(
                    f"{path}: {img.width}×{img.height} pixels is more than the {max_pixels:,} allowed"
                )
            img.load()  # decode now: a corrupt pixel stream must fail here, not be half-read later
            img = _upright(img, path)
            if img.mode in ("I;16", "I;16B", "I;16L", "I"):
                img = img.point(lambda v: v / 256).convert("L")  # 16-bit -> 8-bit by its top byte
            if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
                rgba = img.convert("RGBA")
                background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
                img = Image.alpha_composite(background, rgba)  # transparent -> white, not black
            return img.convert("RGB")
    except ImageError:
        raise
    except Image.DecompressionBombError as err:  # Pillow's own limit, hit while reading some headers
        raise ImageError(
            f"{path}: refused, too many pixels: more than the {max_pixels:,} allowed ({err})"
        ) from err
    except _DECODE_ERRORS as err:
        raise ImageError(f"{path}: not a readable image ({type(err).__name__}: {err})") from err
