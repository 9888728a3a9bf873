"""The Python API (captioning.Captioner): what it takes as an image, and what it refuses by name."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
import torch
from PIL import Image


@pytest.mark.parametrize(
    "tensor,fragment",
    [
        (torch.full((3, 8, 8), float("nan")), "NaN/inf"),
        (torch.rand(3, 0, 5), "(3, 0, 5)"),
        (torch.rand(3, 8, 8) * 255, "values in [0, 1]"),
    ],
)
def test_the_api_refuses_tensors_it_would_caption_wrongly(good_checkpoint, tensor, fragment) -> None:
    from captioning import Captioner

    with pytest.raises(ValueError, match=re.escape(fragment)):
        Captioner.from_checkpoint(good_checkpoint).caption(tensor)


@pytest.mark.parametrize(
    ("image", "fragment"),
    [
        (Image.new("RGB", (0, 0)), "0x0 pixels has nothing to caption"),
        (np.zeros((0, 0, 3), np.uint8), "0x0 pixels has nothing to caption"),
        (torch.arange(3 * 8 * 8).view(3, 8, 8) * 4, "must hold values in [0, 255], got [0, 764]"),
        (-torch.ones(3, 8, 8, dtype=torch.int8), "must hold values in [0, 255], got [-1, -1]"),
        (np.full((8, 8, 3), 300, np.int64), "must hold values in [0, 255]"),
        (torch.ones(3, 8, 8, dtype=torch.bool), "torch.bool cannot be pixels"),
        (np.full((8, 8, 3), 300, np.uint16), "must hold values in [0, 255], got [300, 300]"),
    ],
    ids=["pil-0x0", "array-0x0", "int64-0-1020", "int8-negative", "array-int64-300", "bool", "uint16-300"],
)
def test_the_api_refuses_empty_images_and_integers_a_cast_would_wrap(
    good_checkpoint, image, fragment
) -> None:
    from captioning import Captioner

    model = Captioner.from_checkpoint(good_checkpoint)
    with pytest.raises(ValueError, match=re.escape(fragment)):
        model.caption(image)


def test_a_float_array_in_0_1_is_captioned_like_the_same_tensor(good_checkpoint) -> None:
    from captioning import Captioner

    model = Captioner.from_checkpoint(good_checkpoint)
    values = np.random.default_rng(0).random((16, 16, 3))
    from_array = model.caption(values)[0].caption
    assert from_array == model.caption(torch.from_numpy(values).permute(2, 0, 1).float())[0].caption


def test_the_api_takes_a_bytes_path_and_refuses_an_empty_overlay_image(good_checkpoint, photo) -> None:
    from captioning import Captioner

    model = Captioner.from_checkpoint(good_checkpoint)
    (from_bytes,) = model.caption(bytes(photo))
    assert from_bytes.image == str(photo)
    assert from_bytes.caption == model.caption(photo)[0].caption
    with pytest.raises(
        ValueError, match=re.escape("an image of 0x0 pixels has nothing to caption or draw on")
    ):
        from_bytes.overlay(Image.new("RGB", (0, 0)))


@pytest.mark.parametrize(
    ("image", "error", "fragment"),
    [
        (None, TypeError, "cannot caption a NoneType"),
        ({"image": "x.png"}, TypeError, "cannot caption a dict"),
        (np.array([[object()]]), ValueError, "an image array of dtype object cannot be pixels"),
    ],
    ids=["none", "dict", "object-array"],
)
def test_the_api_refuses_what_is_not_an_image(good_checkpoint, image, error, fragment) -> None:
    from captioning import Captioner

    with pytest.raises(error, match=re.escape(fragment)):
        Captioner.from_checkpoint(good_checkpoint).caption(image)


def test_the_api_captions_image_bytes_and_binary_files(good_checkpoint, photo) -> None:
    from captioning import Captioner

    model = Captioner.from_checkpoint(good_checkpoint)
    expected = model.caption(photo)[0].caption
    data = photo.read_bytes()
    assert model.caption(data)[0].caption == expected
    assert model.caption(io.BytesIO(data))[0].caption == expected
    with open(photo, "rb") as f:
        assert model.caption(f)[0].caption == expected
    with pytest.raises(ValueError, match=re.escape("bytes of image data>: not a readable image")):
        model.caption(b"\0not an image")


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda m, p: m.caption(p, seed=-1), "seed=-1: expected an integer in [0, 2**63)"),
        (
            lambda m, p: m.caption(p, do_sample=True, temperature=1e-45),
            "temperature=1e-45: expected a number in [1e-4",
        ),
        (lambda m, p: m.caption(b""), "an empty string or bytes is neither an image path nor image data"),
        (lambda m, p: m.caption(""), "an empty string or bytes is neither an image path nor image data"),
        (lambda m, p: m.caption(123), "cannot caption a int"),
        (lambda m, p: m.caption(p)[0].overlay(p, p.with_suffix(".txt")), ".txt is not an image format"),
    ],
    ids=["seed", "temperature", "empty-bytes", "empty-string", "int", "overlay-suffix"],
)
def test_the_api_names_more_bad_arguments(good_checkpoint, photo, call, fragment) -> None:
    from captioning import Captioner

    with pytest.raises((ValueError, TypeError), match=re.escape(fragment)):
        call(Captioner.from_checkpoint(good_checkpoint), photo)


def test_the_api_reads_memoryviews_and_names_a_truncated_pil_image(good_checkpoint, photo, tmp_path) -> None:
    from captioning import Captioner

    model = Captioner.from_checkpoint(good_checkpoint)
    assert model.caption(memoryview(photo.read_bytes()))[0].caption == model.caption(photo)[0].caption
    cut = tmp_path / "cut.png"
    cut.write_bytes(photo.read_bytes()[:200])
    with pytest.raises(ValueError, match=re.escape(f"{cut}: the PIL image cannot be decoded")):
        model.caption(Image.open(cut))


def test_the_api_names_bad_paths_and_never_overlays_onto_its_image(good_checkpoint, photo) -> None:
    from captioning import Captioner

    for bad in (123, None, ""):
        with pytest.raises(TypeError, match=re.escape(f"from_checkpoint: path={bad!r}")):
            Captioner.from_checkpoint(bad)
    model = Captioner.from_checkpoint(good_checkpoint)
    result = model.caption(photo)[0]
    before = photo.read_bytes()
    with pytest.raises(ValueError, match=re.escape(f"{photo}: is the captioned image")):
        result.overlay(photo, photo)
    assert photo.read_bytes() == before
    with pytest.raises(TypeError, match=re.escape("overlay: path=123")):
        result.overlay(photo, 123)
    with pytest.raises(ValueError, match=re.escape("an image of 0x0 pixels has nothing to caption")):
        model.caption(Image.new("RGBA", (0, 0)))


def test_a_pil_image_and_a_float_rgba_array_read_as_their_files_do(tmp_path) -> None:
    # Image.open keeps the EXIF orientation unapplied: the PIL image is turned upright as the path is.
    # A float RGBA array's transparency is composited on white, as a uint8 one's (and a PNG's) is.
    from captioning.inference.image_inputs import as_pil

    from support.corpus import exif_jpeg

    exif_jpeg(tmp_path / "rotated.jpg", orientation=6)  # stored 48x32, shown 32x48
    from_path = as_pil(tmp_path / "rotated.jpg")
    with Image.open(tmp_path / "rotated.jpg") as opened:
        from_pil = as_pil(opened)
    assert from_path.size == from_pil.size == (32, 48)
    assert np.array_equal(np.asarray(from_path), np.asarray(from_pil))

    rgba = np.zeros((4, 4, 4), dtype=np.float32)  # black and fully transparent
    rgba[:2, :, 0], rgba[:2, :, 3] = 1.0, 1.0  # the top half opaque red
    as_float, as_bytes = (np.asarray(as_pil(a)) for a in (rgba, (rgba * 255).astype(np.uint8)))
    assert np.array_equal(as_float, as_bytes)
    assert as_float[0, 0].tolist() == [255, 0, 0] and as_float[3, 3].tolist() == [255, 255, 255]
