"""Image loading that fails clearly: every error names the file and what was wrong."""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageOps

# Refuse decompression bombs before allocating: 20000×20000 RGB would be 1.2 GB.
MAX_PIXELS = 40_000_000


class ImageError(ValueError):
    """An image file that cannot be used, with its path and the reason."""


def load_rgb(path: str | Path, max_pixels: int = MAX_PIXELS) -> Image.Image:
    """Open ``path`` as an upright RGB image (EXIF rotation applied; gray, palette, RGBA, CMYK converted)."""
    path = Path(path)
    if not path.is_file():
        raise ImageError(f"{path}: no such image file")
    if path.stat().st_size == 0:
        raise ImageError(f"{path}: the file is empty (0 bytes)")
    try:
        with Image.open(path) as img:
            if img.width * img.height > max_pixels:
                raise ImageError(
                    f"{path}: {img.width}×{img.height} pixels is more than the {max_pixels:,} allowed"
                )
            img = ImageOps.exif_transpose(img)
            if img.mode in ("I;16", "I;16B", "I;16L", "I"):
                img = img.point(lambda v: v / 256).convert("L")  # 16-bit -> 8-bit by its top byte
            if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
                rgba = img.convert("RGBA")
                background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
                img = Image.alpha_composite(background, rgba)  # transparent -> white, not black
            return img.convert("RGB")
    except ImageError:
        raise
    except Image.DecompressionBombError as err:
        raise ImageError(f"{path}: refused, too many pixels ({err})") from err
    except (OSError, SyntaxError, ValueError) as err:
        raise ImageError(f"{path}: not a readable image ({err})") from err
