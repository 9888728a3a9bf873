"""What the API accepts as an image, read into an 8-bit RGB PIL image with one clear error per bad input:
paths (``str``, ``Path``, path bytes), encoded image bytes or a binary file, PIL images, (3, H, W) or
(1, H, W) tensors (floats in [0, 1] or 0-255 integers) and (H, W[, C]) arrays. Nothing is clipped or cast
silently: values out of range, NaN, booleans and empty images are refused, naming what was expected.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch
from PIL import Image

from captioning.data.images import decode_rgb, load_rgb, to_rgb, upright

# bytes: a path (os.fsencode) or, with a NUL byte no path can hold, an image file's encoded bytes;
# a binary file object (open(..., "rb"), io.BytesIO) is read as an encoded image too.
ImageInput = str | Path | bytes | memoryview | BinaryIO | Image.Image | torch.Tensor | np.ndarray
SINGLE = (str, Path, bytes, bytearray, memoryview, Image.Image, torch.Tensor, np.ndarray, io.IOBase)


def as_pil(image: ImageInput) -> Image.Image:
    """Any accepted input as an 8-bit RGB PIL image (paths through the checked loader); an empty image
    (0 pixels) is refused: its caption would be made up."""
    return _nonempty(_as_pil(image))


def _nonempty(picture: Image.Image) -> Image.Image:
    if picture.width < 1 or picture.height < 1:
        raise ValueError(
            f"an image of {picture.width}x{picture.height} pixels has nothing to caption or draw on"
        )
    return picture


def _as_pil(image: ImageInput) -> Image.Image:
    if isinstance(image, str | bytes | bytearray | memoryview) and not len(image):
        raise ValueError("an empty string or bytes is neither an image path nor image data")
    if isinstance(image, memoryview):
        image = image.tobytes()
    if isinstance(image, bytes | bytearray):
        if b"\0" in image:  # no path holds a NUL byte, and every image format's header does
            return decode_rgb(bytes(image), name=f"<{len(image)} bytes of image data>")
        return load_rgb(os.fsdecode(bytes(image)))
    if isinstance(image, io.IOBase) or (hasattr(image, "read") and not isinstance(image, Image.Image)):
        return decode_rgb(image, name=getattr(image, "name", None) or f"<{type(image).__name__}>")
    if isinstance(image, str | Path):
        return load_rgb(image)
    if isinstance(image, Image.Image):
        _nonempty(image)  # before decoding: an empty RGBA image would fail inside the compositing
        try:  # a lazily opened file is decoded here: a truncated one fails now, named
            image.load()
        except (OSError, SyntaxError, ValueError, EOFError) as err:
            name = getattr(image, "filename", "") or "a PIL image"
            raise ValueError(f"{name}: the PIL image cannot be decoded ({err})") from err
        # upright as a path is read (Image.open keeps the EXIF orientation unapplied): the same caption
        return to_rgb(upright(image, getattr(image, "filename", "") or "a PIL image"))
    if isinstance(image, torch.Tensor):
        if image.dim() != 3 or image.shape[0] not in (1, 3) or image.shape[1] < 1 or image.shape[2] < 1:
            raise ValueError(f"an image tensor must be (3, H, W) or (1, H, W), got {tuple(image.shape)}")
        array = _checked_uint8(image.detach().cpu(), "an image tensor")
        return Image.fromarray(array.expand(3, -1, -1).permute(1, 2, 0).numpy().astype(np.uint8))
    if isinstance(image, np.ndarray):
        if image.dtype.kind not in "biuf":  # objects, strings, complex: no pixel values
            raise ValueError(
                f"an image array of dtype {image.dtype} cannot be pixels; expected uint8 or floats in [0, 1]"
            )
        shape_ok = image.ndim == 2 or (image.ndim == 3 and image.shape[2] in (1, 3, 4))
        if shape_ok and image.size and image.dtype != np.uint8:  # a tensor's checks of range and type
            if image.dtype.kind == "u":  # torch has no min/max for uint16/32/64
                image = image.astype(np.int64)
            image = _checked_uint8(torch.from_numpy(np.ascontiguousarray(image)), "an image array").numpy()
        if shape_ok:  # 8-bit now: an alpha channel is composited on white (to_rgb), as for a PNG
            return to_rgb(
                Image.fromarray(image.squeeze(-1) if image.ndim == 3 and image.shape[2] == 1 else image)
            )
        raise ValueError(f"an image array must be (H, W) or (H, W, 3), got {image.shape}")
    raise TypeError(
        f"cannot caption a {type(image).__name__}: give a path, PIL image, tensor, array, binary file or "
        "image bytes"
    )


def _checked_uint8(array: torch.Tensor, what: str) -> torch.Tensor:
    """Pixel values as uint8: floats must lie in [0, 1] and integers in [0, 255] (nothing clipped or
    wrapped silently); booleans and complex numbers are refused. ``what`` names the input in the errors."""
    if array.is_floating_point():  # floats mean [0, 1]; anything else would silently clip
        if not torch.isfinite(array).all():
            raise ValueError(f"{what} has NaN/inf values; expected floats in [0, 1]")
        lo, hi = float(array.min()), float(array.max())
        if lo < -1e-3 or hi > 1 + 1e-3:
            raise ValueError(
                f"a float {what.removeprefix('an ')} must hold values in [0, 1], got [{lo:.3g}, {hi:.3g}] "
                "(divide 0-255 data by 255, or pass a uint8 tensor)"
            )
        return (array.float().clamp(0, 1) * 255).round().byte()
    if array.dtype != torch.uint8:  # integers are 0-255 pixel values; a cast would wrap the others
        if array.dtype == torch.bool or array.is_complex():
            raise ValueError(f"{what} of {array.dtype} cannot be pixels; expected uint8 or floats in [0, 1]")
        lo, hi = int(array.min()), int(array.max())
        if lo < 0 or hi > 255:
            raise ValueError(
                f"an integer {what.removeprefix('an ')} must hold values in [0, 255], got [{lo}, {hi}] "
                "(rescale 16-bit data, or pass floats in [0, 1])"
            )
        return array.to(torch.uint8)
    return array


def failure_reason(err: BaseException, name: str) -> str:
    """An input's error message without a leading copy of its name (the failure line names it once); a
    name the system cannot look up at all (ENAMETOOLONG, ...): "cannot be opened" and why."""
    if isinstance(err, OSError) and err.strerror:
        return f"cannot be opened: {err.strerror}"
    text = " ".join(str(err).split()) or type(err).__name__
    return text.removeprefix(f"{name}: ")


def input_name(image: ImageInput, index: int) -> str:
    if isinstance(image, bytes | bytearray) and b"\0" not in image:
        return os.fsdecode(bytes(image))
    return str(image) if isinstance(image, str | Path) else f"<input {index}>"
