"""Bad dataset files (annotation files, image folders, corrupt images in a dataset) give clear errors."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import hydra
import pytest
from PIL import Image

from captioning.data.readers import DatasetError

from support import compose_train
from support.corpus import RED


def _karpathy_files(root: Path) -> Path:
    """A Karpathy split file whose train split holds one good image and one of each problem."""
    for name in ("good.jpg", "dup.jpg", "quiet.jpg", "v.jpg", "t.jpg"):
        Image.new("RGB", (8, 8), RED).save(root / name)
    (root / "corrupt.jpg").write_text("not a JPEG")

    def entry(imgid: int, filename: str, split: str, *raws: str) -> dict:
        return {"imgid": imgid, "filename": filename, "split": split, "sentences": [{"raw": r} for r in raws]}

    images = [
        entry(0, "good.jpg", "train", "A red square.", "..."),
        entry(1, "quiet.jpg", "train", "?!", "   "),  # only punctuation / empty: nothing to learn
        entry(2, "gone.jpg", "train", "A missing picture."),
        entry(0, "dup.jpg", "train", "The same id again."),
        {"imgid": 3, "split": "train", "sentences": []},  # no filename
        entry(4, "v.jpg", "val", "A val image."),
        entry(5, "t.jpg", "test", "A test image."),
    ]
    path = root / "dataset_tiny.json"
    path.write_text(json.dumps({"images": images}), encoding="utf-8")
    return path


def _karpathy_overrides(root: Path, dataset_json: Path) -> list[str]:
    return [
        "data=karpathy",
        f"paths.karpathy_json={dataset_json}",
        f"paths.coco={root}",
        "data.num_workers=0",
        "data.min_word_count=1",
        "data.image_size=16",
        "data.batch_size=2",
    ]


def test_a_symlinked_sub_folder_inside_the_image_folder_is_allowed_and_escapes_are_not(tmp_path) -> None:
    from captioning.data.readers import DatasetError, read_coco

    images, elsewhere = tmp_path / "val2014", tmp_path / "disk2"
    images.mkdir()
    elsewhere.mkdir()
    Image.new("RGB", (8, 8)).save(elsewhere / "a.png")
    (images / "sub").symlink_to(elsewhere)
    ann = tmp_path / "captions.json"
    entry = {
        "images": [{"id": 1, "file_name": "sub/a.png"}],
        "annotations": [{"id": 1, "image_id": 1, "caption": "a dog"}],
    }
    ann.write_text(json.dumps(entry))
    assert [r.image_id for r in read_coco(ann, images)] == [1]
    entry["images"][0]["file_name"] = "sub/../../disk2/a.png"
    ann.write_text(json.dumps(entry))
    with pytest.raises(DatasetError, match="outside"):
        read_coco(ann, images)
    entry["images"][0]["file_name"] = "."
    ann.write_text(json.dumps(entry))
    with pytest.raises(DatasetError, match="is a folder; expected an image file"):
        read_coco(ann, images)


def test_a_folder_given_as_an_annotation_file_is_named_a_folder(tmp_path: Path) -> None:
    from captioning.data.records import DatasetError, existing

    with pytest.raises(DatasetError, match="is a folder; expected"):
        existing(tmp_path, "an annotation file")


def test_dataset_problem_is_an_error_naming_file_and_entry(tmp_path: Path) -> None:
    dataset_json = _karpathy_files(tmp_path)
    cfg = compose_train(_karpathy_overrides(tmp_path, dataset_json))
    with pytest.raises(Exception) as info:  # Hydra wraps the reader's error, keeping its message
        hydra.utils.instantiate(cfg.data)
    assert isinstance(info.value.__cause__ or info.value, DatasetError)
    assert f"{dataset_json} images[0] (id 0) sentences[1]['raw']" in str(info.value)
    assert "has no word tokens" in str(info.value)


def test_dataset_problems_are_skipped_and_counted_when_the_config_says_so(tmp_path: Path, caplog) -> None:
    dataset_json = _karpathy_files(tmp_path)
    cfg = compose_train([*_karpathy_overrides(tmp_path, dataset_json), "+data.train.records.on_error=skip"])
    with caplog.at_level(logging.WARNING, logger="captioning.data.records"):
        datamodule = hydra.utils.instantiate(cfg.data)
    train_source = datamodule.sources["train"]
    assert [r.image_id for r in train_source.records] == [0]
    assert train_source.captions(0) == ("A red square.",)
    counts = "1 duplicate id, 3 empty caption, 1 image without valid caption, 1 malformed entry, "
    counts += "1 missing image file"
    assert f"{dataset_json}: skipped {counts}" in caplog.text


def test_a_corrupt_image_in_a_dataset_fails_naming_the_file(tmp_path: Path) -> None:
    """Checked before training reads it: a split whose images are all unreadable is an error naming the
    first file (one bad image among many is skipped: tests/data/test_readers.py)."""
    dataset_json = _karpathy_files(tmp_path)
    data = json.loads(dataset_json.read_text())
    data["images"][0]["filename"] = "corrupt.jpg"
    dataset_json.write_text(json.dumps(data))
    cfg = compose_train([*_karpathy_overrides(tmp_path, dataset_json), "+data.train.records.on_error=skip",
                         f"paths.cache={tmp_path / 'cache'}"])  # fmt: skip
    datamodule = hydra.utils.instantiate(cfg.data)
    with pytest.raises(
        DatasetError,
        match=rf"train split: 1 of 1 images are unreadable.*{tmp_path / 'corrupt.jpg'}: not a readable image",
    ):
        datamodule.build_vocab()
