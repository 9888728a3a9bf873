"""Image decoding (captioning.data.images): bad files refused naming file and reason, odd but valid ones
loaded upright as RGB, unusual modes and pixel values handled."""

from __future__ import annotations

import logging
import resource
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from captioning.cli.main import main as captioning_main
from captioning.data.images import ImageError, load_rgb

from support.corpus import (
    BAD_IMAGE_NAMES,
    BLUE,
    ODD_BUT_VALID,
    RED,
    exif_jpeg,
    halves,
    jpeg_with_raw_exif,
)


@pytest.mark.parametrize("mode", ["I;16", "I"])
def test_8_bit_data_in_a_16_bit_file_is_not_black(mode: str, tmp_path: Path) -> None:
    from captioning.data.images import load_rgb

    gray = np.arange(0, 240, dtype=np.uint16).reshape(12, 20)
    path = tmp_path / "g16.png"
    Image.fromarray(gray).convert(mode).save(path) if mode == "I" else Image.fromarray(gray).save(path)
    pixels = np.asarray(load_rgb(path))[..., 0]
    assert pixels.max() == 239 and pixels.min() == 0  # the values themselves, not their (zero) top byte


def test_an_image_without_a_finite_pixel_is_refused(good_checkpoint, photo, tmp_path, capsys):
    nan = tmp_path / "nan.tif"
    Image.fromarray(np.full((16, 16), np.nan, np.float32)).save(nan)
    assert captioning_main(["caption", str(nan), str(photo), "--checkpoint", str(good_checkpoint)]) == 1
    out, err = capsys.readouterr()
    assert out.startswith(f"{photo}\t")
    assert str(nan) in err and "no finite pixel" in err


def test_a_png_key_colour_is_composited_on_white(tmp_path: Path) -> None:
    from captioning.data.images import load_rgb

    pixels = np.zeros((4, 4, 3), dtype=np.uint8)
    pixels[:2] = (10, 200, 30)  # the top half is the key colour (tRNS): transparent
    path = tmp_path / "key.png"
    Image.fromarray(pixels).save(path, transparency=(10, 200, 30))
    assert "transparency" in Image.open(path).info
    rgb = np.asarray(load_rgb(path))
    assert (rgb[:2] == 255).all() and (rgb[2:] == 0).all()  # key -> white, the black half kept


def test_a_fully_transparent_image_is_white_with_a_warning_naming_it(tmp_path: Path, caplog) -> None:
    import logging

    from captioning.data.images import load_rgb

    path = tmp_path / "clear.png"
    Image.new("RGBA", (6, 6), (200, 0, 0, 0)).save(path)
    with caplog.at_level(logging.WARNING, logger="captioning.data.images"):
        rgb = np.asarray(load_rgb(path))
    assert (rgb == 255).all()
    assert f"{path}: fully transparent" in caplog.text


def test_nan_pixels_of_a_float_image_are_said(tmp_path: Path, caplog) -> None:
    from captioning.data.images import load_rgb

    values = np.random.default_rng(0).random((20, 30)).astype(np.float32)
    values[:5] = np.nan
    path = tmp_path / "partnan.tif"
    Image.fromarray(values, mode="F").save(path)
    with caplog.at_level("WARNING"):
        img = load_rgb(path)
    assert img.size == (30, 20) and np.asarray(img)[:5].max() == 0
    assert any(
        str(path) in r.getMessage() and "150 of 600 pixels are NaN" in r.getMessage() for r in caplog.records
    )


def test_corrupt_exif_is_one_warning_naming_the_image_and_it_is_captioned(
    good_checkpoint, photo, capsys, caplog
) -> None:
    bad = photo.parent / "bad_exif.jpg"  # an EXIF IFD that claims 5 entries and holds one byte
    Image.open(photo).save(bad, "JPEG", exif=b"Exif\x00\x00MM\x00\x2a\x00\x00\x00\x08\x00\x05\x01")
    with caplog.at_level("WARNING"):
        assert captioning_main(["caption", str(photo), str(bad), "--checkpoint", str(good_checkpoint)]) == 0
    out, err = capsys.readouterr()
    assert [line.split("\t")[0] for line in out.splitlines()] == [str(photo), str(bad)]
    (record,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert str(bad) in record.getMessage() and "Corrupt EXIF data" in record.getMessage()
    assert "UserWarning" not in err and "warnings.warn" not in err  # Pillow's own two lines are gone


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
    exif_jpeg(source, 6)  # EXIF included: broken metadata must not escape as struct/type errors
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
