"""Image loading that fails clearly: every error names the file and what was wrong.

The pixel limit is checked from the header, before any pixel is decoded, so a tiny file that claims
20000×20000 pixels is refused without allocating its 1.2 GB.
"""

from __future__ import annotations

import io
import logging
import struct
import warnings
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch
from PIL import Image, ImageOps
from torchvision.transforms import functional as TF

from captioning.errors import UserError

_log = logging.getLogger(__name__)

# Refuse decompression bombs before allocating: 20000×20000 RGB would be 1.2 GB.
MAX_PIXELS = 40_000_000

# What Pillow's decoders raise on corrupt or truncated bytes (struct/index/key/type errors come from
# malformed headers and metadata blocks deep inside the format plugins).
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, struct.error, IndexError, KeyError, TypeError)


class ImageError(ValueError, UserError):
    """An image file that cannot be used, with its path and the reason."""


def upright(img: Image.Image, path: Path | str) -> Image.Image:
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
        raise ImageError(
            f"{path}: is a folder, not an image file (pass its images, e.g. sorted(Path({str(path)!r}).glob('*.jpg')); "
            "`captioning caption FOLDER` reads a folder)"
        )
    if not path.exists():
        if path.is_symlink():
            raise ImageError(f"{path}: a symbolic link to nothing (dangling, or a loop of links)")
        raise ImageError(f"{path}: no such image file")
    if not path.is_file():  # a FIFO, a device (/dev/zero), a socket: reading could block or never end
        raise ImageError(f"{path}: not a regular file (a pipe, device or socket), so not an image file")
    if path.stat().st_size == 0:
        raise ImageError(f"{path}: the file is empty (0 bytes)")
    return _decode(path, str(path), max_pixels)


def decode_rgb(data: bytes | BinaryIO, name: str = "image", max_pixels: int = MAX_PIXELS) -> Image.Image:
    """An image file's bytes, or an open binary file, as upright RGB with ``load_rgb``'s checks; errors
    name ``name``."""
    if isinstance(data, bytes | bytearray | memoryview):
        if not len(data):
            raise ImageError(f"{name}: the image data is empty (0 bytes)")
        data = io.BytesIO(bytes(data))
    return _decode(data, name, max_pixels)


def _decode(source: Path | BinaryIO, name: str, max_pixels: int) -> Image.Image:
    """``source`` (a path or a binary file) decoded and checked; every error names ``name``."""
    try:
        # Pillow reports damaged metadata it skips (corrupt EXIF, a bad ICC block) as bare two-line
        # UserWarnings naming neither the file nor the consequence: caught here, logged as one line each.
        with warnings.catch_warnings(record=True) as caught, Image.open(source) as img:
            warnings.simplefilter("always")
            if img.width * img.height > max_pixels:
                raise ImageError(
                    f"{name}: {img.width}×{img.height} pixels is more than the {max_pixels:,} allowed"
                )
            img.load()  # decode now: a corrupt pixel stream must fail here, not be half-read later
            rgb = to_rgb(upright(img, name), name=name)
        for message in dict.fromkeys(" ".join(str(w.message).split()) for w in caught):
            _log.warning("%s: %s (metadata ignored, the pixels are read as stored)", name, message)
        return rgb
    except ImageError:
        raise
    except Image.DecompressionBombError as err:  # Pillow's own limit, hit while reading some headers
        raise ImageError(
            f"{name}: refused, too many pixels: more than the {max_pixels:,} allowed ({err})"
        ) from err
    except _DECODE_ERRORS as err:
        raise ImageError(f"{name}: not a readable image ({type(err).__name__}: {err})") from err


def _to_8bit(img: Image.Image, name: str = "image") -> Image.Image:
    """A single-channel image of more than 8 bits (16/32-bit integer, 32-bit float) as 8-bit gray.

    The container says little of the range, so it is read from the values: floats in [0, 1] are scaled
    by 255, values already in [0, 255] are kept (8-bit data in a 16-bit file), integers up to 65535 keep
    their top byte (16-bit data), and anything else is stretched from its minimum to its maximum (never
    silently all black or all white). An image without one finite value is refused (ValueError)."""
    values = np.asarray(img, dtype=np.float64)
    finite = values[np.isfinite(values)]
    if not finite.size:
        raise ValueError(f"no finite pixel value ({img.mode} image of NaN/inf only)")
    if finite.size < values.size:  # said, not silently made black: the caption may miss what was there
        _log.warning(
            "%s: %d of %d pixels are NaN or infinite; they are read as black (NaN, -inf) or white (+inf)",
            name, values.size - finite.size, values.size,
        )  # fmt: skip
    lo, hi = float(finite.min()), float(finite.max())
    if img.mode == "F" and lo >= 0.0 and hi <= 1.0:
        scaled = values * 255.0
    elif lo >= 0.0 and hi <= 255.0:
        scaled = values
    elif img.mode.startswith("I") and lo >= 0.0 and hi <= 65535.0:  # 16-bit gray PNGs: "I;16" or "I"
        scaled = np.floor(values / 256.0)
    else:
        scaled = (values - lo) / max(hi - lo, 1e-12) * 255.0
    scaled = np.nan_to_num(scaled, nan=0.0, posinf=255.0, neginf=0.0)
    return Image.fromarray(np.clip(np.rint(scaled), 0, 255).astype(np.uint8), mode="L")


def to_rgb(img: Image.Image, name: str = "image") -> Image.Image:
    """Any Pillow image as 8-bit RGB: gray, palette, CMYK converted; >8-bit modes rescaled (``_to_8bit``);
    transparency composited on white (a transparent background would otherwise turn black), both an alpha
    channel and a PNG/GIF key colour (``tRNS``: one value of an RGB, gray or palette image marked
    transparent). An image transparent everywhere becomes plain white, with a warning naming ``name``."""
    if img.mode in ("I", "F") or img.mode.startswith("I;16"):
        img = _to_8bit(img, name)
    if img.mode in ("RGBA", "LA", "PA") or "transparency" in img.info:
        rgba = img.convert("RGBA")  # applies a key colour as alpha 0
        if rgba.getchannel("A").getextrema()[1] == 0:
            _log.warning(
                "%s: fully transparent (alpha 0 everywhere), so it is captioned as a white image", name
            )
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        img = Image.alpha_composite(background, rgba)  # transparent -> white, not black
    return img.convert("RGB")


def image_to_tensor(image: Image.Image, image_size: int) -> torch.Tensor:
    """PIL RGB -> (3, S, S) float in [0, 1], resized (not cropped) so nothing the caption names is cut."""
    if image.size != (image_size, image_size):
        image = image.resize((image_size, image_size), resample=3)  # bicubic
    return TF.pil_to_tensor(image).float().div_(255.0)  # (3, S, S)


class TrainAugment:
    """Training-only augmentation of a PIL image into the (3, S, S) model input (``image_to_tensor``'s
    output for the unaugmented image): a random crop covering ``crop_scale`` of the image's area, its
    aspect ratio within ``crop_ratio`` of the image's own, resized (not cropped again) to S x S.
    Conservative by default: at least 70% of the area stays, so the objects a caption names are rarely cut
    out. (Flips are not pixels alone: the captions' "left" and "right" swap with them, so the data module
    draws them, captioning.data.mirror.) Draws from torch's generator, which Lightning seeds per DataLoader
    worker."""

    def __init__(
        self,
        crop_scale: tuple[float, float] = (0.7, 1.0),
        crop_ratio: tuple[float, float] = (3 / 4, 4 / 3),
    ):
        lo, hi = (float(v) for v in crop_scale) if len(crop_scale) == 2 else (0.0, 0.0)
        if not 0.0 < lo <= hi <= 1.0:
            raise ValueError(f"crop_scale={list(crop_scale)}: expected [min, max] with 0 < min <= max <= 1")
        if not 0.0 < crop_ratio[0] <= 1.0 <= crop_ratio[1]:
            raise ValueError(f"crop_ratio={list(crop_ratio)}: expected [min, max] with 0 < min <= 1 <= max")
        self.crop_scale, self.crop_ratio = (lo, hi), tuple(float(v) for v in crop_ratio)

    def box(
        self, width: int, height: int, generator: torch.Generator | None = None
    ) -> tuple[int, int, int, int]:
        """A crop of a ``width`` x ``height`` image as (left, top, right, bottom), drawn from ``generator``
        (torch's global one when None: a fresh crop per call; a seeded one: a fixed crop, crop_views.py)."""
        lo, hi = self.crop_scale
        area = lo + (hi - lo) * float(torch.rand((), generator=generator))
        log_lo, log_hi = np.log(self.crop_ratio[0]), np.log(self.crop_ratio[1])
        ratio = float(np.exp(log_lo + (log_hi - log_lo) * float(torch.rand((), generator=generator))))  # w/h
        fw, fh = min(1.0, (area * ratio) ** 0.5), min(1.0, (area / ratio) ** 0.5)  # fractions of W, H
        w, h = max(1, round(width * fw)), max(1, round(height * fh))
        left = int(torch.randint(0, width - w + 1, (), generator=generator))
        top = int(torch.randint(0, height - h + 1, (), generator=generator))
        return left, top, left + w, top + h

    def __call__(self, image: Image.Image, image_size: int) -> torch.Tensor:
        return image_to_tensor(image.crop(self.box(image.width, image.height)), image_size)  # (3, S, S)
