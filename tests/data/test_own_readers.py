"""Your own captions read directly (captioning/data/own.py): CSV, JSON Lines, a folder with its captions file,
each bad input one line naming the file, the line and what was expected; and the reader registry."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from PIL import Image

from captioning.data.own import read_csv, read_image_folder, read_jsonl, read_own
from captioning.data.records import READERS, SUFFIXES, DatasetError, ImageRecord, register_reader
from captioning.errors import ConfigError


@pytest.fixture
def images(tmp_path: Path) -> Path:
    folder = tmp_path / "images"
    for name in ("a.jpg", "b.png", "dogs/c.png"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), (200, 30, 30)).save(folder / name)
    return folder


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_csv_rows_become_images_in_first_listed_order_with_their_captions(tmp_path, images) -> None:
    csv = write(
        tmp_path / "train.csv",
        "\ufeffcaption,image,source\n"  # a spreadsheet's BOM; the columns in any order, others ignored
        'A red square.,b.png,me\n"a dog, wet, runs",dogs/c.png,me\n\nred block ,b.png,me\n',
    )
    records = read_csv(csv, images)
    assert records == [
        ImageRecord("b.png", images / "b.png", ("A red square.", "red block")),
        ImageRecord("dogs/c.png", images / "dogs/c.png", ("a dog, wet, runs",)),
    ]


@pytest.mark.parametrize(
    "text, message",
    [
        ("file,text\na.jpg,a dog\n", r"train\.csv line 1: header \['file', 'text'\] lacks the column\(s\) 'image', 'caption'"),
        ("", r"train\.csv: empty file; expected a header row 'image,caption'"),
        ("image,caption\na.jpg,a dog\nb.png\n", r"train\.csv line 3: got 1 field\(s\) \['b\.png'\]; expected 2"),
        ("image,caption\na.jpg,a dog\nb.png, ...\n", r"train\.csv line 3: caption ' \.\.\.' has no word tokens"),
        ("image,caption\na.jpg,a dog\nmissing.jpg,a cat\n", r"train\.csv line 3 \(missing\.jpg\): image file .*missing\.jpg does not exist"),
        ("image,caption\n../../etc/passwd,a cat\n", r"train\.csv line 2 \(\.\./\.\./etc/passwd\): .* resolves outside"),
        ('image,caption\na.jpg,"a dog\nb.png,red\n', r"train\.csv line 2: not readable as CSV \(unexpected end of data\)"),
        ('image,caption\na.jpg,red\na.jpg,"a" dog\n', r"train\.csv line 3: not readable as CSV \(',' expected after"),
        ("image,caption\n", r"train\.csv: no usable image in its rows: none listed"),  # not the file twice
    ],
)  # fmt: skip
def test_a_bad_csv_is_one_line_naming_the_file_the_line_and_what_was_expected(
    tmp_path, images, text, message
):
    with pytest.raises(DatasetError, match=message) as err:
        read_csv(write(tmp_path / "train.csv", text), images)
    assert "\n" not in str(err.value)


def test_csv_skip_drops_bad_rows_keeps_the_good_ones_and_counts_them(tmp_path, images, caplog) -> None:
    csv = write(tmp_path / "train.csv", "image,caption\na.jpg,a dog\nb.png\nmissing.jpg,a cat\nb.png,!!\n")
    with caplog.at_level(logging.WARNING, logger="captioning.data.records"):
        records = read_csv(csv, images, on_error="skip")
    assert records == [ImageRecord("a.jpg", images / "a.jpg", ("a dog",))]
    counts = "1 empty caption, 1 image without valid caption, 1 malformed row, 1 missing image file"
    assert [r.getMessage() for r in caplog.records] == [f"{csv}: skipped {counts}"]


def test_jsonl_reads_one_caption_a_line_and_lists_of_captions(tmp_path, images) -> None:
    jsonl = write(
        tmp_path / "val.jsonl",
        '{"image": "a.jpg", "captions": ["a dog", "a brown dog"]}\n\n{"image": "b.png", "caption": "red"}\n'
        '{"image": "a.jpg", "caption": "dog on grass"}\n',
    )
    assert read_jsonl(jsonl, images) == [
        ImageRecord("a.jpg", images / "a.jpg", ("a dog", "a brown dog", "dog on grass")),
        ImageRecord("b.png", images / "b.png", ("red",)),
    ]


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"image": "a.jpg", "caption": "a dog"', r"val\.jsonl line 2: malformed JSON at column 38: Expecting ',' delimiter; expected one object a line"),
        ('["a.jpg", "a dog"]', r"val\.jsonl line 2: got \['a\.jpg', 'a dog'\]; expected an object with 'image'"),
        ('{"image": "a.jpg", "text": "a dog"}', r"val\.jsonl line 2: no 'caption' or 'captions' key in .*; expected"),
        ('{"image": "a.jpg", "captions": "a dog"}', r"val\.jsonl line 2: 'captions' is 'a dog'; expected a list of at least one caption"),
        ('{"image": "a.jpg", "captions": []}', r"val\.jsonl line 2: 'captions' is \[\]; expected a list of at least one caption"),
        ('{"image": "a.jpg", "captions": ["a dog", 7]}', r"val\.jsonl line 2 captions\[1\]: caption is 7; expected a string"),
        ('{"image": 3, "caption": "a dog"}', r"val\.jsonl line 2: image file name is 3; expected a non-empty string"),
    ],
)  # fmt: skip
def test_a_bad_jsonl_line_is_one_line_naming_the_file_the_line_and_the_key(tmp_path, images, line, message):
    jsonl = write(tmp_path / "val.jsonl", '{"image": "b.png", "caption": "red"}\n' + line + "\n")
    with pytest.raises(DatasetError, match=message):
        read_jsonl(jsonl, images)
    assert read_jsonl(jsonl, images, on_error="skip")[0].image_id == "b.png"  # the good line still read


def test_a_folder_is_read_by_the_reader_registered_for_its_captions_file(tmp_path, images) -> None:
    write(images / "captions.jsonl", '{"image": "dogs/c.png", "caption": "a dog"}\n')
    assert read_image_folder(images) == [ImageRecord("dogs/c.png", images / "dogs/c.png", ("a dog",))]
    write(images / "captions.csv", "image,caption\na.jpg,a dog\n")
    with pytest.raises(DatasetError, match=r"images: 2 captions files \(captions\.csv, captions\.jsonl\); expected exactly one of captions\.json, captions\.csv, captions\.jsonl"):  # fmt: skip
        read_image_folder(images)
    with pytest.raises(DatasetError, match=r"images/dogs: no captions file; expected exactly one of"):
        read_image_folder(images / "dogs")


def test_read_own_picks_the_reader_by_suffix_or_folder_and_names_unset_keys(tmp_path, images) -> None:
    csv = write(tmp_path / "t.csv", "image,caption\na.jpg,a dog\n")
    txt = write(tmp_path / "t.txt", "image,caption\na.jpg,a dog\n")
    expected = [ImageRecord("a.jpg", images / "a.jpg", ("a dog",))]
    assert read_own(csv, images, captions_key="paths.train_captions") == expected
    assert read_own(txt, images, captions_key="paths.train_captions", format="csv") == expected
    with pytest.raises(DatasetError, match=r"t\.txt: no reader for the suffix '\.txt' \(paths\.train_captions\); expected one of \.json \(coco\), \.csv \(csv\), \.jsonl \(jsonl\)"):  # fmt: skip
        read_own(txt, images, captions_key="paths.train_captions")
    with pytest.raises(ConfigError, match=r"^paths\.val_captions is not set; e\.g\. captioning-train"):
        read_own(None, images, captions_key="paths.val_captions")
    with pytest.raises(ConfigError, match=r"^paths\.images is not set"):
        read_own(csv, None, captions_key="paths.train_captions")
    with pytest.raises(ConfigError, match=r"format='tsv': no such reader; expected one of coco, csv, jsonl"):
        read_own(csv, images, captions_key="k", format="tsv")
    write(images / "captions.csv", "image,caption\nb.png,red\n")
    assert read_own(images, None, captions_key="k")[0].image_id == "b.png"  # a folder needs no paths.images
    with pytest.raises(DatasetError, match=r"trian: not found; expected a captions file \(\.json, \.csv, \.jsonl\) or a folder .* \(paths\.train_captions\)"):  # fmt: skip
        read_own(tmp_path / "trian", None, captions_key="paths.train_captions")


@pytest.fixture
def registries():
    """READERS and SUFFIXES as they were, after the test."""
    saved = dict(READERS), dict(SUFFIXES)
    yield
    for registry, before in zip((READERS, SUFFIXES), saved):
        registry.clear()
        registry.update(before)


def test_a_reader_registers_by_decorator_and_a_taken_name_or_suffix_is_refused(registries, tmp_path, images):
    from captioning.data import records

    @register_reader("pipes", suffixes=(".psv",))
    def read_pipes(captions, image_dir, *, on_error="raise"):
        rows = [
            (*line.split("|"), f"{captions} line {n}")
            for n, line in enumerate(Path(captions).read_text().splitlines(), 1)
        ]
        report = records.Problems(captions, on_error)
        return records.collect_records(rows, Path(image_dir), report, "pipes")

    psv = write(tmp_path / "t.psv", "a.jpg|a dog\n")
    assert read_own(psv, images, captions_key="k") == [ImageRecord("a.jpg", images / "a.jpg", ("a dog",))]
    with pytest.raises(ValueError, match=r"name 'csv' and suffix '\.psv' already registered"):
        register_reader("csv", suffixes=(".psv",))(lambda *a, **k: [])
