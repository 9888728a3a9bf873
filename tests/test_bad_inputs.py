"""Bad images give a clear error naming the file, and the caption CLI still captions every good one.

Dataset files and training configs are in tests/test_bad_data_and_configs.py.
The corpus (tests/corpus.py) is generated here at test time; the giant image is a 70-byte hand-made header.
"""

from __future__ import annotations

import json
import logging
import resource
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from captioning.cli.main import main
from captioning.data.images import ImageError, load_rgb
from captioning.data.synthetic import render_scene

from corpus import (
    BAD_IMAGE_NAMES,
    BLUE,
    RED,
    WHITE,
    halves,
    jpeg_with_raw_exif,
    rgb48_png,
    write_bad_images,
    write_checkpoint,
)


@pytest.fixture(scope="module")
def bad(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    return write_bad_images(tmp_path_factory.mktemp("bad_images"))


# ------------------------------------------------------------------------------------------ images


def test_corpus_lists_every_bad_image(bad) -> None:
    assert set(bad) == set(BAD_IMAGE_NAMES)


@pytest.mark.parametrize("name", BAD_IMAGE_NAMES)
def test_bad_image_is_refused_naming_file_and_reason(bad, name: str) -> None:
    path, fragment = bad[name]
    with pytest.raises(ImageError) as info:
        load_rgb(path)
    assert str(info.value).startswith(f"{path}: ")
    assert fragment in str(info.value)


def test_giant_headers_are_refused_before_any_pixel_is_decoded(bad) -> None:
    assert bad["huge.png"][0].stat().st_size < 100  # it only claims 20000×20000 pixels
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    start = time.perf_counter()
    for name in ("huge.png", "big.png"):
        with pytest.raises(ImageError):
            load_rgb(bad[name][0])
    assert time.perf_counter() - start < 2.0
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before) / 1024
    assert grown_mib < 100  # decoding 20000×20000 RGB would need 1200 MiB


def test_pixel_limit_is_a_parameter(tmp_path: Path) -> None:
    path = tmp_path / "64.png"
    Image.new("RGB", (64, 48)).save(path)
    with pytest.raises(ImageError, match=r"64×48 pixels is more than the 3,000 allowed"):
        load_rgb(path, max_pixels=3000)
    assert load_rgb(path, max_pixels=64 * 48).size == (64, 48)


def _exif_jpeg(path: Path, orientation: int) -> None:
    exif = Image.Exif()
    exif[0x0112] = orientation  # the Orientation tag
    halves(48, 32, RED, BLUE).save(path, quality=95, exif=exif.tobytes())


def _save(image: Image.Image, **kwargs):
    return lambda path: image.save(path, **kwargs)


def _palette(transparent: bool) -> Image.Image:
    image = Image.new("P", (8, 8), 1)
    image.putpalette([0, 0, 0, *RED] + [0] * (256 * 3 - 6))
    if transparent:
        image.info["transparency"] = 1
    return image


# name -> (writer, expected (width, height), expected RGB at the top-left and bottom-right, tolerance)
ODD_BUT_VALID = {
    "gray.png": (_save(Image.new("L", (8, 6), 77)), (8, 6), (77, 77, 77), (77, 77, 77), 0),
    "bilevel.png": (_save(Image.new("1", (8, 6), 1)), (8, 6), WHITE, WHITE, 0),
    "transparent.png": (_save(Image.new("RGBA", (8, 6), (0, 0, 0, 0))), (8, 6), WHITE, WHITE, 0),
    "half_red.png": (
        _save(Image.new("RGBA", (8, 6), (255, 0, 0, 128))),
        (8, 6),
        (255, 127, 127),
        (255, 127, 127),
        1,
    ),
    "gray_alpha.png": (_save(Image.new("LA", (8, 6), (0, 0))), (8, 6), WHITE, WHITE, 0),
    "palette.png": (_save(_palette(transparent=False)), (8, 8), RED, RED, 0),
    "palette_transparent.png": (_save(_palette(transparent=True)), (8, 8), WHITE, WHITE, 0),
    "cmyk.jpg": (_save(Image.new("CMYK", (16, 16), (0, 255, 255, 0))), (16, 16), RED, RED, 12),
    "gray16.png": (
        _save(Image.fromarray(np.full((6, 8), 0xAB12, np.uint16))),
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
    "exif_rotated_cw.jpg": (lambda path: _exif_jpeg(path, 6), (32, 48), RED, BLUE, 40),
    # Orientation 8: stored left column is the visual bottom (rotate 90° counter-clockwise).
    "exif_rotated_ccw.jpg": (lambda path: _exif_jpeg(path, 8), (32, 48), BLUE, RED, 40),
    "one_pixel.png": (_save(Image.new("RGB", (1, 1), (10, 20, 30))), (1, 1), (10, 20, 30), (10, 20, 30), 0),
}


@pytest.mark.parametrize("name", sorted(ODD_BUT_VALID))
def test_odd_but_valid_images_load_upright_as_rgb(tmp_path: Path, name: str) -> None:
    write, size, top_left, bottom_right, tolerance = ODD_BUT_VALID[name]
    write(tmp_path / name)
    image = load_rgb(tmp_path / name)
    assert image.mode == "RGB" and image.size == size
    pixels = np.asarray(image).astype(int)  # (H, W, 3)
    np.testing.assert_allclose(pixels[0, 0], top_left, atol=tolerance)
    np.testing.assert_allclose(pixels[-1, -1], bottom_right, atol=tolerance)


def test_random_truncation_and_corruption_only_ever_give_image_error(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    source = tmp_path / "source.jpg"
    _exif_jpeg(source, 6)  # EXIF included: broken metadata must not escape as struct/type errors
    png = tmp_path / "source.png"
    halves(32, 32, RED, BLUE).save(png)
    outcomes = {"loaded": 0, "refused": 0}
    for original in (source.read_bytes(), png.read_bytes()):
        variants = [original[:cut] for cut in rng.integers(1, len(original), 40)]
        for _ in range(80):
            corrupted = bytearray(original)
            for where in rng.integers(0, min(len(original), 400), 3):
                corrupted[where] = int(rng.integers(256))
            variants.append(bytes(corrupted))
        for k, data in enumerate(variants):
            path = tmp_path / f"variant{k}{source.suffix}"
            path.write_bytes(data)
            try:
                assert load_rgb(path).mode == "RGB"
                outcomes["loaded"] += 1
            except ImageError as err:
                assert str(err).startswith(f"{path}: ")
                outcomes["refused"] += 1
    assert outcomes["refused"] > 40 and outcomes["loaded"] + outcomes["refused"] == 240


def test_unreadable_exif_keeps_the_pixels_unrotated(tmp_path: Path, caplog) -> None:
    path = tmp_path / "mangled_exif.jpg"
    orientation_cw = (0x0112, 3, 1, struct.pack(">HH", 6, 0))  # SHORT 6, padded to 4 bytes
    resolution_as_text = (0x011A, 2, 4, b"abc\x00")  # XResolution must be a RATIONAL: Pillow raises TypeError
    jpeg_with_raw_exif(path, halves(48, 32, RED, BLUE), [orientation_cw, resolution_as_text])
    with caplog.at_level(logging.WARNING, logger="captioning.data.images"):
        image = load_rgb(path)
    assert image.mode == "RGB" and image.size == (48, 32)  # the pixels as stored
    assert f"{path}: unreadable EXIF metadata, orientation not applied" in caplog.text


# ------------------------------------------------------------------------------------ caption CLI


def test_caption_cli_captions_every_good_file_and_reports_every_bad_one(bad, tmp_path: Path, capsys) -> None:
    checkpoint = write_checkpoint(tmp_path / "model.ckpt")
    good = []
    for i, name in enumerate(("scene.png", "cmyk.jpg", "exif_rotated_cw.jpg", "gray16.png")):
        path = tmp_path / name
        if name == "scene.png":
            Image.fromarray(render_scene((5, i)).image).save(path)
        else:
            ODD_BUT_VALID[name][0](path)
        good.append(path)
    bad_paths = [bad[name][0] for name in BAD_IMAGE_NAMES]
    mixed = [good[0], *bad_paths[:5], good[1], good[2], *bad_paths[5:], good[3]]
    code = main(["caption", *map(str, mixed), "--checkpoint", str(checkpoint), "--json"])
    out, err = capsys.readouterr()
    assert code == 1
    captioned = [json.loads(line) for line in out.strip().splitlines()]
    assert [c["image"] for c in captioned] == [str(p) for p in good]  # every good one, in order
    assert all(isinstance(c["caption"], str) and c["grid"] == [3, 3] for c in captioned)
    err_lines = err.strip().splitlines()
    for name in BAD_IMAGE_NAMES:
        path, fragment = bad[name]
        assert any(line.startswith(f"error: {path}: ") and fragment in line for line in err_lines), name
    assert err_lines[-1] == f"{len(BAD_IMAGE_NAMES)} of {len(mixed)} images could not be read"


def test_caption_cli_refuses_beam_zero(tmp_path: Path, capsys) -> None:
    image = tmp_path / "scene.png"
    Image.fromarray(render_scene((5, 0)).image).save(image)
    code = main(["caption", str(image), "--checkpoint", str(tmp_path / "unused.ckpt"), "--num-beams", "0"])
    assert code == 2 and "num_beams=0: expected an integer in [1, 64]" in capsys.readouterr().err
