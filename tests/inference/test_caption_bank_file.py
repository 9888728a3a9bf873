"""captioning/inference/caption_bank.py: a caption bank that is broken or malformed is refused, in one line
naming the file (or the bank) and what was expected, never loaded as a good one."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from captioning.inference.caption_bank import CaptionBank, pooled

REFS = [["a red circle"], ["a blue square", "a square"], ["two circles"]]
ENCODER = {"encoder": "tiny", "grid": 4}


def write_bank(path: Path, vectors=None, captions=REFS, image_ids=(0, 1, 2), encoder=ENCODER) -> Path:
    """A bank file as ``CaptionBank.save`` lays it out, with whatever entries are given."""
    vectors = pooled(torch.randn(3, 4, 6)) if vectors is None else vectors
    meta = {"captions": captions, "image_ids": list(image_ids), "encoder": encoder}
    save_file({"vectors": vectors.half().contiguous()}, str(path), {"caption_memory": json.dumps(meta)})
    return path


def rows(*bad: tuple[int, float]) -> torch.Tensor:
    vectors = pooled(torch.randn(3, 4, 6))
    for row, value in bad:
        vectors[row] = value
    return vectors


@pytest.mark.parametrize(
    ("vectors", "fragment"),
    [
        (
            rows((1, float("nan"))),
            "1 of 3 vectors are not pooled grids (1 hold NaN/inf, 0 are all zero; the first is row 1)",
        ),
        (
            rows((0, float("inf")), (2, 0.0)),
            "2 of 3 vectors are not pooled grids (1 hold NaN/inf, 1 are all zero",
        ),
        (rows((2, 0.0)), "1 of 3 vectors are not pooled grids (0 hold NaN/inf, 1 are all zero"),
        (torch.ones(3), "vectors of shape (3,); expected a 2-D (images, D) tensor"),
        (torch.ones(3, 2, 2), "vectors of shape (3, 2, 2); expected a 2-D (images, D) tensor"),
        (torch.ones(3, 0), "vectors of shape (3, 0); expected a 2-D (images, D) tensor with D >= 1"),
    ],
    ids=["nan-row", "inf-and-zero-rows", "zero-row", "1-d", "3-d", "no-width"],
)
def test_broken_vectors_are_refused_naming_the_file_and_the_rows(tmp_path, vectors, fragment) -> None:
    path = write_bank(tmp_path / "bank.safetensors", vectors)
    with pytest.raises(ValueError, match=re.escape(f"{path}: {fragment}")) as caught:
        CaptionBank.load(path)
    assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match=re.escape(f"caption bank: {fragment}")):
        CaptionBank(vectors, REFS, [0, 1, 2], ENCODER)  # the constructor refuses them too


@pytest.mark.parametrize(
    ("entries", "fragment"),
    [
        (
            {"captions": [["a red circle"], [7], ["two circles"]]},
            "caption 7 of row 1; expected a non-empty string",
        ),
        (
            {"captions": [["a red circle"], [""], ["two circles"]]},
            "caption '' of row 1; expected a non-empty string",
        ),
        (
            {"captions": [["a red circle"], ["   "], ["x"]]},
            "caption '   ' of row 1; expected a non-empty string",
        ),
        (
            {"captions": [["a red circle"], "a blue square", ["x"]]},
            "the captions of row 1 are 'a blue square'",
        ),
        ({"captions": [["a red circle"], [], ["x"]]}, "the captions of row 1 are []; expected a list of one"),
        ({"captions": "abc"}, "the caption bank's captions and image_ids are str and list; expected lists"),
        ({"image_ids": [0, [1], 2]}, "image id [1] of row 1; expected a string or an integer"),
        ({"encoder": None}, "the caption bank's encoder identity is None; expected the non-empty identity"),
        ({"encoder": {}}, "the caption bank's encoder identity is {}; expected the non-empty identity"),
        ({"encoder": ""}, "the caption bank's encoder identity is ''; expected the non-empty identity"),
    ],
    ids=[
        "number-caption",
        "empty-caption",
        "blank-caption",
        "string-not-list",
        "no-captions",
        "captions-string",
        "list-id",
        "no-encoder",
        "empty-encoder",
        "blank-encoder",
    ],  # fmt: skip
)
def test_malformed_entries_are_refused_naming_the_file(tmp_path, entries, fragment) -> None:
    path = write_bank(tmp_path / "bank.safetensors", **entries)
    with pytest.raises(ValueError, match=re.escape(f"{path}: {fragment}")) as caught:
        CaptionBank.load(path)
    assert "\n" not in str(caught.value)


def test_the_caption_command_refuses_a_nan_memory_in_one_line(
    good_checkpoint, photo, tmp_path, capsys
) -> None:
    from captioning.cli.main import main

    from support.hostile import assert_one_line

    bank = write_bank(tmp_path / "bank.safetensors", rows((0, float("nan"))))
    assert main(["caption", str(photo), "--checkpoint", str(good_checkpoint), "--rerank", str(bank)]) == 2
    assert_one_line(capsys.readouterr().err, str(bank), "1 of 3 vectors are not pooled grids")


def test_save_writes_only_what_load_accepts_and_never_over_a_model(good_checkpoint, tmp_path) -> None:
    bank = CaptionBank(pooled(torch.randn(3, 4, 6)), REFS, [0, 1, 2])
    with pytest.raises(ValueError, match="m.safetensors: not written: the bank has no encoder identity"):
        bank.save(tmp_path / "m.safetensors")
    assert list(tmp_path.iterdir()) == []
    bank.encoder = ENCODER
    before = good_checkpoint.read_bytes()
    with pytest.raises(ValueError, match="is not a caption bank but a training checkpoint"):
        bank.save(good_checkpoint)
    assert good_checkpoint.read_bytes() == before
    real = tmp_path / "real.safetensors"
    bank.save(real)
    link = tmp_path / "link.safetensors"
    link.symlink_to(real)
    bank.save(link)  # an earlier bank is replaced, through the link
    assert link.is_symlink() and len(CaptionBank.load(link)) == 3


def test_built_memories_drop_captions_with_no_words() -> None:
    from captioning.data.sources import SyntheticSource

    source = SyntheticSource(2, seed=0, split="train")
    original = source.captions

    def with_punctuation(i):
        return [*original(i), "..."]

    source.captions = with_punctuation  # a reference of punctuation only tokenises to nothing
    bank = CaptionBank.build(lambda x: x, lambda i: torch.randn(4, 5), source)
    assert bank.captions == [[" ".join(c.lower().split()) for c in original(i)] for i in range(2)]


def test_a_full_disk_under_bank_out_is_one_line_and_leaves_nothing(
    good_checkpoint, tmp_path, monkeypatch, capsys
):
    """The write's OSError names the file (safetensors' own writer raised a SafetensorError: a traceback)."""
    import errno

    from captioning.cli.main import main
    from captioning.inference import caption_bank

    class FullDisk:
        def __init__(self, path, mode):
            self.file = open(path, mode)  # noqa: SIM115 - closed in __exit__

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

        def write(self, data):
            self.file.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(caption_bank, "open", FullDisk, raising=False)
    out = tmp_path / "bank.safetensors"
    code = main(["bank", "--checkpoint", str(good_checkpoint), "--out", str(out), "data.train.num_images=3"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert str(out) in err[0] and "No space left on device" in err[0] and "nothing was written" in err[0]
    assert list(tmp_path.iterdir()) == []  # no bank, no temp file
