"""Dataset readers: exact records from tiny fixtures, DatasetError messages, skip counts, real Flickr8k."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from captioning.data.readers import (
    DatasetError,
    ImageRecord,
    read_coco,
    read_flickr8k,
    read_karpathy,
)

from support.tiny_datasets import append as _append
from support.tiny_datasets import flickr8k_copy as _flickr
from support.tiny_datasets import jpeg as _jpeg
from support.tiny_datasets import warnings_logged as _warnings

FLICKR8K = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "flickr8k"


def _write_json(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# ---------------------------------------------------------------- COCO


def _coco(tmp_path: Path) -> tuple[Path, Path, dict]:
    """Images listed out of id order; image 7 has captions split around image 2's."""
    root = tmp_path.resolve()
    for name in ("a.jpg", "b.jpg", "c.jpg"):
        _jpeg(root / "img" / name)
    data = {
        "images": [
            {"id": 7, "file_name": "c.jpg"},
            {"id": 2, "file_name": "a.jpg"},
            {"id": 5, "file_name": "b.jpg"},
        ],
        "annotations": [
            {"id": 10, "image_id": 7, "caption": "A cat on a mat.\n"},
            {"id": 11, "image_id": 2, "caption": "A dog runs."},
            {"id": 12, "image_id": 5, "caption": "Two birds."},
            {"id": 13, "image_id": 7, "caption": "A sleepy cat."},
        ],
    }
    return _write_json(root / "captions.json", data), root / "img", data


def test_read_coco_exact_records_sorted_by_id(tmp_path: Path) -> None:
    ann, img, _ = _coco(tmp_path)
    assert read_coco(ann, img) == [
        ImageRecord(2, img / "a.jpg", ("A dog runs.",)),
        ImageRecord(5, img / "b.jpg", ("Two birds.",)),
        ImageRecord(7, img / "c.jpg", ("A cat on a mat.", "A sleepy cat.")),
    ]


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda d: d.pop("annotations"), "'annotations' missing"),
        (lambda d: d["annotations"][1].pop("caption"), "annotations[1]"),
        (lambda d: d["annotations"][2].update(caption=" ... !"), "no word tokens"),
        (lambda d: d["annotations"].append({"id": 14, "image_id": 99, "caption": "x"}), "image_id 99"),
        (lambda d: d["annotations"].append({"id": 10, "image_id": 2, "caption": "x"}), "annotation id 10"),
        (lambda d: d["images"].append({"id": 2, "file_name": "b.jpg"}), "image id 2 appears twice"),
        (lambda d: d["images"].append({"id": 3, "file_name": "zz.jpg"}), "image id 3: no valid caption"),
        (lambda d: d["images"][0].update(file_name="gone.jpg"), "gone.jpg does not exist"),
    ],
)
def test_read_coco_errors_name_file_and_entry(tmp_path: Path, mutate, fragment: str) -> None:
    ann, img, data = _coco(tmp_path)
    mutate(data)
    _write_json(ann, data)
    with pytest.raises(DatasetError, match="captions.json") as info:
        read_coco(ann, img)
    assert fragment in str(info.value)


def test_read_coco_malformed_json_and_missing_file(tmp_path: Path) -> None:
    ann, img, _ = _coco(tmp_path)
    ann.write_text('{"images": [', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"captions\.json: malformed JSON at line 1"):
        read_coco(ann, img)
    with pytest.raises(DatasetError, match="nope.json: not found"):
        read_coco(tmp_path / "nope.json", img)


def test_read_coco_skip_counts_and_drops(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ann, img, data = _coco(tmp_path)
    data["annotations"][1]["caption"] = "   "  # image 2's only caption -> image 2 dropped
    data["annotations"].append({"id": 14, "image_id": 99, "caption": "orphan"})
    data["images"][2]["file_name"] = "gone.jpg"  # image 5 missing on disk
    _write_json(ann, data)
    with caplog.at_level(logging.WARNING):
        records = read_coco(ann, img, on_error="skip")
    assert records == [ImageRecord(7, img / "c.jpg", ("A cat on a mat.", "A sleepy cat."))]
    counts = "1 empty caption, 1 image without valid caption, 1 missing image file, 1 unknown image"
    assert _warnings(caplog) == [f"{ann}: skipped {counts}"]


def test_on_error_must_be_raise_or_skip(tmp_path: Path) -> None:
    ann, img, _ = _coco(tmp_path)
    with pytest.raises(ValueError, match="on_error must be one of"):
        read_coco(ann, img, on_error="ignore")


# ---------------------------------------------------------------- Karpathy


def _karpathy(tmp_path: Path) -> tuple[Path, Path, dict]:
    root = tmp_path.resolve()

    def entry(split: str, filename: str, imgid: int, *raws: str, cocoid: int | None = None) -> dict:
        _jpeg(root / "coco" / ("val2014" if cocoid else "") / filename)
        e = {"filename": filename, "imgid": imgid, "split": split, "sentences": [{"raw": r} for r in raws]}
        if cocoid is not None:
            e.update(filepath="val2014", cocoid=cocoid)
        return e

    data = {
        "dataset": "coco",
        "images": [
            entry("test", "t.jpg", 0, "A test image."),
            entry("train", "a.jpg", 1, "A horse.", "A brown horse ."),
            entry("restval", "r.jpg", 2, "A restval boat.", cocoid=4242),
            entry("val", "v.jpg", 3, "A val tree."),
            entry("train", "b.jpg", 4, "A bus."),
        ],
    }
    return _write_json(root / "dataset_coco.json", data), root / "coco", data


def test_read_karpathy_splits_restval_ids_and_order(tmp_path: Path) -> None:
    js, root, _ = _karpathy(tmp_path)
    train = [
        ImageRecord(1, root / "a.jpg", ("A horse.", "A brown horse .")),
        ImageRecord(4242, root / "val2014" / "r.jpg", ("A restval boat.",)),  # cocoid wins over imgid
        ImageRecord(4, root / "b.jpg", ("A bus.",)),
    ]
    assert read_karpathy(js, root, "train") == train
    assert read_karpathy(js, root, "train", include_restval=False) == [train[0], train[2]]
    assert read_karpathy(js, root, "restval") == [train[1]]
    assert read_karpathy(js, root, "val") == [ImageRecord(3, root / "v.jpg", ("A val tree.",))]
    assert read_karpathy(js, root, "test") == [ImageRecord(0, root / "t.jpg", ("A test image.",))]
    with pytest.raises(ValueError, match="split must be one of"):
        read_karpathy(js, root, "dev")


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda d: d.pop("images"), "'images' missing"),
        (lambda d: d["images"][1].pop("split"), "images[1]: got"),
        (lambda d: d["images"][1].pop("sentences"), "images[1]: got"),
        (
            lambda d: d["images"][4].update(sentences=[{"tokens": ["a"]}]),
            "images[4] (id 4) sentences[0]['raw']",
        ),
        (lambda d: d["images"][1]["sentences"][1].update(raw="?!"), "no word tokens"),
        (lambda d: d["images"][4].update(imgid=1), "images[4] (id 1): id 1 appears twice"),
        (lambda d: d["images"][2].update(filename="gone.jpg"), "gone.jpg does not exist"),
    ],
)
def test_read_karpathy_errors_name_file_and_entry(tmp_path: Path, mutate, fragment: str) -> None:
    js, root, data = _karpathy(tmp_path)
    mutate(data)
    _write_json(js, data)
    with pytest.raises(DatasetError, match="dataset_coco.json") as info:
        read_karpathy(js, root, "train")
    assert fragment in str(info.value)


def test_read_karpathy_validates_only_requested_split(tmp_path: Path) -> None:
    js, root, data = _karpathy(tmp_path)
    data["images"][0]["sentences"] = [{"raw": ""}]  # a bad test entry does not affect train
    _write_json(js, data)
    assert [r.image_id for r in read_karpathy(js, root, "train")] == [1, 4242, 4]
    with pytest.raises(DatasetError, match=r"images\[0\] \(id 0\) sentences\[0\]"):
        read_karpathy(js, root, "test")


def test_read_karpathy_skip_counts_and_drops(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    js, root, data = _karpathy(tmp_path)
    data["images"][1]["sentences"][0]["raw"] = "..."  # one of two captions bad: record kept
    data["images"][4]["imgid"] = 1  # duplicate of images[1] -> dropped
    _write_json(js, data)
    with caplog.at_level(logging.WARNING):
        records = read_karpathy(js, root, "train", on_error="skip")
    assert records == [
        ImageRecord(1, root / "a.jpg", ("A brown horse .",)),
        ImageRecord(4242, root / "val2014" / "r.jpg", ("A restval boat.",)),
    ]
    assert _warnings(caplog) == [f"{js}: skipped 1 duplicate id, 1 empty caption"]


# ---------------------------------------------------------------- Flickr8k


def test_unreadable_images_are_skipped_counted_and_listed_or_refused(tmp_path: Path, capsys) -> None:
    """One corrupt file no longer kills a run when it comes up: checked up front, per data.on_bad_image."""
    from captioning.data.datamodule import CaptionDataModule
    from captioning.data.sources import RecordSource

    root = _flickr(tmp_path)
    (root / "Flicker8k_Dataset" / "111_a.jpg").write_bytes(b"not a jpeg")
    train = RecordSource(read_flickr8k(root, "train"))
    val = RecordSource(read_flickr8k(root, "dev"))
    dm = CaptionDataModule(train, val, check_cache=str(tmp_path / "cache"), skipped_list=str(tmp_path / "skipped"),
                           max_bad_fraction=0.5)  # fmt: skip
    dm.build_vocab()
    assert [r.image_id for r in dm.sources["train"].records] == ["222_b"]
    listed = (tmp_path / "skipped.train.txt").read_text()
    assert "111_a.jpg: not a readable image" in listed
    assert "train split: skipped 1 of 2 unreadable images" in capsys.readouterr().out
    assert (tmp_path / "cache" / "image_checks.json").is_file()  # verdicts cached for the next run
    strict = CaptionDataModule(RecordSource(read_flickr8k(root, "train")), val, on_bad_image="raise")
    with pytest.raises(DatasetError, match=r"train split: 1 unreadable image\(s\), the first: .*111_a.jpg"):
        strict.build_vocab()
    few = CaptionDataModule(RecordSource(read_flickr8k(root, "train")), val, max_bad_fraction=0.1)
    with pytest.raises(
        DatasetError,
        match=r"1 of 2 images are unreadable, more than data.max_bad_fraction=0.1 allows "
        r"\(data.max_bad_fraction=0.5 would skip them\)",
    ):
        few.build_vocab()


def test_a_file_name_escaping_the_image_folder_is_refused(tmp_path: Path) -> None:
    root = _flickr(tmp_path)
    _append(root / "Flickr8k.token.txt", "../../etc/passwd#0\tA caption .\n")
    _append(root / "Flickr_8k.trainImages.txt", "../../etc/passwd\n")
    with pytest.raises(DatasetError, match=r"resolves outside .*Flicker8k_Dataset"):
        read_flickr8k(root, "train")


# ---------------------------------------------------------------- file-level problems, every reader


def test_annotation_files_that_are_not_utf8_name_the_file_and_byte(tmp_path: Path) -> None:
    js, root, data = _karpathy(tmp_path / "k")
    js.write_bytes(json.dumps(data).replace("A bus.", "A caf\u00e9 bus.").encode("latin-1"))
    with pytest.raises(
        DatasetError, match=r"dataset_coco\.json: not UTF-8 text \(byte 0xe9 at offset \d+, line 1\)"
    ):
        read_karpathy(js, root, "train")
    coco, images, _ = _coco(tmp_path / "c")
    coco.write_bytes(b'{"images": [], "annotations": [], "info": "\xff"}')
    with pytest.raises(DatasetError, match=r"captions\.json: not UTF-8 text \(byte 0xff"):
        read_coco(coco, images)
    root = _flickr(tmp_path / "f")
    token = root / "Flickr8k.token.txt"
    token.write_bytes(token.read_bytes() + "333_c.jpg#1\tA na\u00efve man .\n".encode("cp1252"))
    with pytest.raises(
        DatasetError, match=r"Flickr8k\.token\.txt: not UTF-8 text \(byte 0xef at offset \d+, line 7\)"
    ):
        read_flickr8k(root, "train")


@pytest.mark.parametrize("depth", [100_000, 2_000_000])
def test_absurdly_nested_json_is_one_dataset_error(tmp_path: Path, depth: int) -> None:
    js, root, _ = _karpathy(tmp_path)
    js.write_text("[" * depth + "]" * depth, encoding="utf-8")
    with pytest.raises(DatasetError, match=r"dataset_coco\.json: JSON nested deeper than the parser's limit"):
        read_karpathy(js, root, "train")


def test_a_karpathy_split_name_that_matches_nothing_lists_the_names_found(tmp_path: Path) -> None:
    js, root, data = _karpathy(tmp_path)
    for entry in data["images"]:
        entry["split"] = {"train": "TRAIN", "restval": "rest"}.get(entry["split"], entry["split"])
    _write_json(js, data)
    with pytest.raises(DatasetError) as info:
        read_karpathy(js, root, "train")
    message = str(info.value)
    assert str(js) in message and "\n" not in message
    assert "no image has split 'restval' or 'train'" in message
    assert "split names found: 'TRAIN' (2), 'rest' (1), 'test' (1), 'val' (1)" in message


def test_a_split_whose_every_image_is_skipped_says_so(tmp_path: Path) -> None:
    js, root, data = _karpathy(tmp_path)
    data["images"][3]["filename"] = "gone.jpg"  # the only val image
    _write_json(js, data)
    with pytest.raises(
        DatasetError,
        match=r"dataset_coco\.json: no usable image in split 'val': all skipped \(1 missing image file\)",
    ):
        read_karpathy(js, root, "val", on_error="skip")
    coco, images, data = _coco(tmp_path / "c")
    _write_json(coco, {"images": [], "annotations": []})
    with pytest.raises(DatasetError, match=r"captions\.json: no usable image in 'images': none listed"):
        read_coco(coco, images)
    root = _flickr(tmp_path / "f")
    (root / "Flickr_8k.devImages.txt").write_text("\n", encoding="utf-8")
    with pytest.raises(
        DatasetError, match=r"Flickr_8k\.devImages\.txt: no usable image in the 'dev' split list: none listed"
    ):
        read_flickr8k(root, "dev")


def test_a_fifo_among_the_images_is_not_a_regular_file_not_a_missing_one(tmp_path: Path) -> None:
    root = _flickr(tmp_path)
    image = root / "Flicker8k_Dataset" / "111_a.jpg"
    image.unlink()
    os.mkfifo(image)  # reading it would block the loader forever (a /dev/zero link would never end)
    with pytest.raises(
        DatasetError,
        match=rf"{image} is not a regular file \(a pipe, device or socket\); expected an image file",
    ):
        read_flickr8k(root, "train")
    records = read_flickr8k(root, "train", on_error="skip")
    assert image not in [r.path for r in records]


def test_the_fraction_a_refusal_suggests_is_one_the_check_allows() -> None:
    from captioning.data.verify import _enough, apply_policy

    for bad, total in ((29, 100), (57, 100), (63, 90), (29, 50), (1, 24), (1, 2), (3, 1000)):
        fraction = float(_enough(bad, total))
        apply_policy("train", {i: "x.jpg" for i in range(bad)}, total, "skip", fraction)  # allowed: no raise
        assert round(fraction - 0.01, 2) * total < bad  # a hundredth less would not allow them
