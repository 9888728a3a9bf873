"""The Flickr8k reader: exact records in split-list order, errors naming the file and line, skip counts,
the layouts copies are unpacked in (text files beside the images or in ``Flickr8k_text/``), a missing
split named with the lists found, and the real copy where ``../shared`` has one."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from captioning.data.readers import DatasetError, ImageRecord, read_flickr8k
from captioning.data.sources import MissingSplit, RecordSource, flickr8k_split

from support.tiny_datasets import append as _append
from support.tiny_datasets import flickr8k_copy as _flickr
from support.tiny_datasets import warnings_logged as _warnings

FLICKR8K = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "flickr8k"


def test_read_flickr8k_exact_records_in_split_file_order(tmp_path: Path) -> None:
    root = _flickr(tmp_path)
    images = root / "Flicker8k_Dataset"
    assert read_flickr8k(root, "train") == [
        ImageRecord("222_b", images / "222_b.jpg", ("A dog in the snow .", "A second caption for b .")),
        ImageRecord("111_a", images / "111_a.jpg", ("A child climbs stairs .", "A girl in pink .")),
    ]
    dev = [ImageRecord("333_c", images / "333_c.jpg", ("A man on a bike .",))]
    assert read_flickr8k(root, "dev") == dev
    assert read_flickr8k(root, "val") == dev


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda r: _append(r / "Flickr8k.token.txt", "333_c.jpg no tab\n"), "Flickr8k.token.txt line 7"),
        (lambda r: _append(r / "Flickr8k.token.txt", "111_a.jpg#2\t , .\n"), "line 7 (111_a.jpg#2)"),
        (lambda r: _append(r / "Flickr8k.token.txt", "111_a.jpg#1\tAgain.\n"), "#1 repeats"),
        (lambda r: _append(r / "Flickr_8k.trainImages.txt", "222_b.jpg\n"), "trainImages.txt line 3"),
        (lambda r: _append(r / "Flickr_8k.trainImages.txt", "444_d.jpg\n"), "no '444_d.jpg#<k>' line"),
        (lambda r: (r / "Flicker8k_Dataset" / "111_a.jpg").unlink(), "111_a.jpg does not exist"),
        (lambda r: (r / "Flickr_8k.trainImages.txt").unlink(), "trainImages.txt: not found"),
    ],
)
def test_read_flickr8k_errors_name_file_and_entry(tmp_path: Path, mutate, fragment: str) -> None:
    root = _flickr(tmp_path)
    mutate(root)
    with pytest.raises(DatasetError, match=r"Flickr8k\.token\.txt|Flickr_8k\.trainImages\.txt") as info:
        read_flickr8k(root, "train")
    assert fragment in str(info.value)


def test_read_flickr8k_missing_test_split_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="Flickr_8k.testImages.txt: not found"):
        read_flickr8k(_flickr(tmp_path), "test")


def test_read_flickr8k_skip_counts_and_drops(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = _flickr(tmp_path)
    _append(root / "Flickr8k.token.txt", "garbage line\n111_a.jpg#2\t\n")
    _append(root / "Flickr_8k.trainImages.txt", "111_a.jpg\n333_c.jpg\n")
    (root / "Flicker8k_Dataset" / "333_c.jpg").unlink()
    with caplog.at_level(logging.WARNING):
        records = read_flickr8k(root, "train", on_error="skip")
    assert [(r.image_id, len(r.captions)) for r in records] == [("222_b", 2), ("111_a", 2)]
    split_file = root / "Flickr_8k.trainImages.txt"
    expected = "1 duplicate id, 1 empty caption, 1 malformed line, 1 missing image file"
    assert _warnings(caplog) == [f"{split_file}: skipped {expected}"]


@pytest.mark.skipif(not FLICKR8K.is_dir(), reason=f"real Flickr8k not found at {FLICKR8K}")
def test_read_real_flickr8k_train_and_dev() -> None:
    train, dev = read_flickr8k(FLICKR8K, "train"), read_flickr8k(FLICKR8K, "dev")
    assert (len(train), len(dev)) == (6000, 1000)
    assert {len(r.captions) for r in train + dev} == {5}
    assert all(r.path.is_file() for r in train + dev)
    assert not {r.image_id for r in train} & {r.image_id for r in dev}
    first = (FLICKR8K / "Flickr_8k.trainImages.txt").read_text(encoding="utf-8").split()[0]
    assert train[0].path == FLICKR8K.resolve() / "Flicker8k_Dataset" / first


def test_flickr8k_split_test_is_an_error_naming_the_lists_found_or_the_real_test_split(
    tmp_path: Path,
) -> None:
    """split=test never scores the dev images under another name (the evaluate trap)."""
    from captioning.compose import compose_config
    from captioning.inference.evaluation import build_source

    root = _flickr(tmp_path)
    cfg, _ = compose_config("eval", ["data=flickr8k", f"paths.flickr8k={root}", "split=test"])
    with pytest.raises(DatasetError) as info:
        build_source(cfg.data, cfg.split)
    message = str(info.value)
    assert "Flickr_8k.testImages.txt: not found" in message
    assert "split lists found: Flickr_8k.devImages.txt, Flickr_8k.trainImages.txt" in message
    assert isinstance(flickr8k_split(str(root), "test"), MissingSplit)
    (root / "Flickr_8k.testImages.txt").write_text("111_a.jpg\n", encoding="utf-8")  # now it has one
    source = build_source(cfg.data, cfg.split)
    assert isinstance(source, RecordSource) and [source.image_id(i) for i in range(len(source))] == ["111_a"]


TEXT_FILES = ("Flickr8k.token.txt", "Flickr_8k.trainImages.txt", "Flickr_8k.devImages.txt")


@pytest.mark.parametrize(
    ("text", "images"),
    [("Flickr8k_text", "Flicker8k_Dataset"), (".", "Flickr8k_Dataset/Flicker8k_Dataset"),
     ("Flickr8k_text", "Flickr8k_Dataset/Flicker8k_Dataset"), (".", "Flickr8k_Dataset")],
    ids=["text folder", "images in the zip's folder", "both zips in their folders", "images renamed"],
)  # fmt: skip
def test_the_layouts_copies_are_unpacked_in_read_the_same_records(tmp_path: Path, text, images) -> None:
    """A copy with the text files in Flickr8k_text/ (or the images in Flickr8k_Dataset/Flicker8k_Dataset/,
    as the zips unpack into folders of their names) was "Flickr_8k.testImages.txt: not found ... split
    lists found: none": the same records are read, each image at its own path."""
    flat = _flickr(tmp_path / "flat")
    root = tmp_path / "nested" / "flickr8k"
    (root / text).mkdir(parents=True, exist_ok=True)
    for name in TEXT_FILES:
        shutil.copy(flat / name, root / text / name)
    (root / images).parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(flat / "Flicker8k_Dataset", root / images)
    (root / text / "Flickr_8k.testImages.txt").write_text("111_a.jpg\n", encoding="utf-8")
    for split in ("train", "dev"):
        want = [
            ImageRecord(r.image_id, root.resolve() / images / r.path.name, r.captions)
            for r in read_flickr8k(flat, split)
        ]
        assert read_flickr8k(root, split) == want
    source = flickr8k_split(str(root), "test")
    assert isinstance(source, RecordSource) and [source.image_id(i) for i in range(len(source))] == ["111_a"]
    (root / text / "Flickr_8k.testImages.txt").unlink()
    with pytest.raises(DatasetError) as info:
        len(flickr8k_split(str(root), "test"))
    lists = ", ".join(str(Path(text) / n) for n in ("Flickr_8k.devImages.txt", "Flickr_8k.trainImages.txt"))
    assert f"split lists found: {lists}" in str(info.value)


def test_a_root_given_with_a_tilde_is_read_for_every_split(tmp_path: Path, monkeypatch) -> None:
    """``paths.flickr8k='~/f8k'`` (quoted, so the shell left the ~): the test split was "not found" while
    dev was read; every split now expands it."""
    monkeypatch.setenv("HOME", str(tmp_path))
    root = _flickr(tmp_path)
    (root / "Flickr_8k.testImages.txt").write_text("333_c.jpg\n", encoding="utf-8")
    for split, ids in (("val", ["333_c"]), ("test", ["333_c"]), ("train", ["222_b", "111_a"])):
        source = flickr8k_split("~/flickr8k", split)
        assert isinstance(source, RecordSource) and [source.image_id(i) for i in range(len(source))] == ids


def test_where_both_arrangements_exist_the_files_beside_the_images_are_read(tmp_path: Path) -> None:
    """A copy with a split list both at its root and in Flickr8k_text/ (one unpacked over the other) reads
    the root's, the original layout; and says which file it read when that one is wrong."""
    root = _flickr(tmp_path)
    (root / "Flickr8k_text").mkdir()
    (root / "Flickr8k_text" / "Flickr_8k.trainImages.txt").write_text("333_c.jpg\n", encoding="utf-8")
    assert [r.image_id for r in read_flickr8k(root, "train")] == ["222_b", "111_a"]
    _append(root / "Flickr_8k.trainImages.txt", "444_d.jpg\n")
    with pytest.raises(DatasetError, match=rf"{root / 'Flickr_8k.trainImages.txt'} line 3 \(444_d.jpg\)"):
        read_flickr8k(root, "train")
