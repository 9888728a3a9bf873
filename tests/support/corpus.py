"""The bad-input corpus, generated at test time (no binary blobs in the repo).

Images that must be refused with a clear error, images that are odd but valid, hand-built PNG headers
(a 20000×20000 image in 70 bytes), and a tiny captioning checkpoint to derive broken ones from.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from captioning.data.vocab import SPECIALS, Vocab
from captioning.training.build import build_model
from captioning.training.lit_module import CaptionLitModule

from support import TINY

RED, BLUE, WHITE = (255, 0, 0), (0, 0, 255), (255, 255, 255)
BAD_IMAGE_NAMES = (
    "truncated.jpg",
    "truncated.png",
    "corrupt_header.jpg",
    "corrupt_data.png",
    "text.jpg",
    "empty.jpg",
    "huge.png",
    "big.png",
    "missing.png",
    "folder.jpg",
)


def png_bytes(
    width: int, height: int, pixels: bytes | None, bit_depth: int = 8, color_type: int = 2
) -> bytes:
    """A PNG written by hand: signature, IHDR, IDAT (only if ``pixels``), IEND; ``pixels`` are raw rows."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    idat = chunk(b"IDAT", zlib.compress(pixels)) if pixels is not None else b""
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + idat + chunk(b"IEND", b"")


def rgb48_png(top: tuple[int, int, int], bottom: tuple[int, int, int], size: int = 4) -> bytes:
    """16 bits per channel RGB: rows of ``top`` then ``bottom`` (16-bit samples), filter byte 0 per row."""
    rows = b""
    for y in range(size):
        sample = top if y < size // 2 else bottom
        rows += b"\x00" + struct.pack(">3H", *sample) * size
    return png_bytes(size, size, rows, bit_depth=16)


def jpeg_with_raw_exif(path: Path, image: Image.Image, entries: list[tuple[int, int, int, bytes]]) -> None:
    """A JPEG whose EXIF block is hand-built: one IFD of (tag, TIFF type, count, 4 value bytes) entries."""
    tiff = b"MM\x00\x2a" + struct.pack(">IH", 8, len(entries))  # big-endian header, IFD at offset 8
    for tag, kind, count, value in entries:
        tiff += struct.pack(">HHI", tag, kind, count) + value
    image.save(path, "JPEG", quality=95, exif=b"Exif\x00\x00" + tiff + struct.pack(">I", 0))


def halves(width: int, height: int, left: tuple, right: tuple) -> Image.Image:
    array = np.zeros((height, width, 3), np.uint8)
    array[:, : width // 2], array[:, width // 2 :] = left, right
    return Image.fromarray(array)


def write_bad_images(folder: Path) -> dict[str, tuple[Path, str]]:
    """name -> (path, fragment the ImageError message must contain besides the path)."""
    folder.mkdir(parents=True, exist_ok=True)
    noise = Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8))
    noise.save(folder / "whole.jpg", quality=90)
    noise.save(folder / "whole.png")
    jpeg, png = (folder / "whole.jpg").read_bytes(), (folder / "whole.png").read_bytes()
    corrupt_png = bytearray(png)
    corrupt_png[len(png) // 2 : len(png) // 2 + 16] = b"\xff" * 16  # inside IDAT: the CRC no longer matches
    files = {
        "truncated.jpg": (jpeg[: len(jpeg) // 2], "not a readable image"),
        "truncated.png": (png[: len(png) * 3 // 5], "not a readable image"),
        "corrupt_header.jpg": (jpeg[:2] + b"\x00" * 40 + jpeg[42:], "not a readable image"),
        "corrupt_data.png": (bytes(corrupt_png), "not a readable image"),
        "text.jpg": (b"this is a caption, not a JPEG\n", "not a readable image"),
        "empty.jpg": (b"", "the file is empty (0 bytes)"),
        "huge.png": (png_bytes(20000, 20000, None), "too many pixels: more than the 40,000,000 allowed"),
        "big.png": (png_bytes(8000, 6000, None), "8000×6000 pixels is more than the 40,000,000 allowed"),
    }
    out = {}
    for name, (data, fragment) in files.items():
        (folder / name).write_bytes(data)
        out[name] = (folder / name, fragment)
    out["missing.png"] = (folder / "missing.png", "no such image file")
    (folder / "folder.jpg").mkdir(exist_ok=True)
    out["folder.jpg"] = (folder / "folder.jpg", "is a folder, not an image file")
    (folder / "whole.jpg").unlink()
    (folder / "whole.png").unlink()
    return out


def build_module(words: list[str], extra: list[str] | None = None, recorded: bool = True) -> CaptionLitModule:
    """A freshly initialised CaptionLitModule from the composed TINY config, built as in captioning.training.train
    (which records the data config it trains on: evaluate's default data=)."""
    from captioning.compose import compose_config

    cfg, choices = compose_config("train", [*TINY, *(extra or [])])
    torch.manual_seed(0)
    module = build_model(cfg.model, Vocab([*SPECIALS, *words]))
    module.trained_on = choices["data"] if recorded else None  # recorded=False: a checkpoint from before
    return module


def checkpoint_dict(module: CaptionLitModule) -> dict:
    """What Lightning writes for ``module``, reduced to what loading for captioning reads."""
    checkpoint = {"epoch": 0, "global_step": 0, "state_dict": module.state_dict()}
    module.on_save_checkpoint(checkpoint)
    return checkpoint


def write_checkpoint(
    path: Path, words: list[str] | None = None, extra: list[str] | None = None, recorded: bool = True
) -> Path:
    words = words if words is not None else ["a", "red", "circle", "square", "left", "of"]
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint_dict(build_module(words, extra, recorded)), path)
    return path


# Images that are odd but valid, shared by the image loader's and the caption CLI's tests.
def exif_jpeg(path: Path, orientation: int) -> None:
    exif = Image.Exif()
    exif[0x0112] = orientation  # the Orientation tag
    halves(48, 32, RED, BLUE).save(path, quality=95, exif=exif.tobytes())


def save_as(image: Image.Image, **kwargs):
    return lambda path: image.save(path, **kwargs)


def palette_image(transparent: bool) -> Image.Image:
    image = Image.new("P", (8, 8), 1)
    image.putpalette([0, 0, 0, *RED] + [0] * (256 * 3 - 6))
    if transparent:
        image.info["transparency"] = 1
    return image


# name -> (writer, expected (width, height), expected RGB at the top-left and bottom-right, tolerance)
ODD_BUT_VALID = {
    "gray.png": (save_as(Image.new("L", (8, 6), 77)), (8, 6), (77, 77, 77), (77, 77, 77), 0),
    "bilevel.png": (save_as(Image.new("1", (8, 6), 1)), (8, 6), WHITE, WHITE, 0),
    "transparent.png": (save_as(Image.new("RGBA", (8, 6), (0, 0, 0, 0))), (8, 6), WHITE, WHITE, 0),
    "half_red.png": (
        save_as(Image.new("RGBA", (8, 6), (255, 0, 0, 128))),
        (8, 6),
        (255, 127, 127),
        (255, 127, 127),
        1,
    ),
    "gray_alpha.png": (save_as(Image.new("LA", (8, 6), (0, 0))), (8, 6), WHITE, WHITE, 0),
    "palette.png": (save_as(palette_image(transparent=False)), (8, 8), RED, RED, 0),
    "palette_transparent.png": (save_as(palette_image(transparent=True)), (8, 8), WHITE, WHITE, 0),
    "cmyk.jpg": (save_as(Image.new("CMYK", (16, 16), (0, 255, 255, 0))), (16, 16), RED, RED, 12),
    "gray16.png": (
        save_as(Image.fromarray(np.full((6, 8), 0xAB12, np.uint16))),
        (8, 6),
        (0xAB, 0xAB, 0xAB),
        (0xAB, 0xAB, 0xAB),
        0,
    ),
    "rgb48.png": (
        lambda path: path.write_bytes(rgb48_png((0xFF00, 0x1234, 0x0000), (0x0000, 0x00FF, 0x8080))),
        (4, 4),
        (0xFF, 0x12, 0x00),
        (0x00, 0x00, 0x80),
        0,
    ),
    # Orientation 6: stored left column is the visual top (rotate 90° clockwise to display).
    "exif_rotated_cw.jpg": (lambda path: exif_jpeg(path, 6), (32, 48), RED, BLUE, 40),
    # Orientation 8: stored left column is the visual bottom (rotate 90° counter-clockwise).
    "exif_rotated_ccw.jpg": (lambda path: exif_jpeg(path, 8), (32, 48), BLUE, RED, 40),
    "one_pixel.png": (save_as(Image.new("RGB", (1, 1), (10, 20, 30))), (1, 1), (10, 20, 30), (10, 20, 30), 0),
}
