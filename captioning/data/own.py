"""``data=own``: your own captions read directly, as a CSV file, a JSON Lines file, a COCO-style JSON file
or a folder of images holding its captions file (docs/guides/own-data.md).

- CSV (``.csv``): a header row naming the columns ``image`` and ``caption`` (others are ignored), then
  one row per caption: ``beach.jpg,Two people walk along the beach.``
- JSON Lines (``.jsonl``): one object per line, ``{"image": "beach.jpg", "caption": "..."}`` or
  ``{"image": "beach.jpg", "captions": ["...", "..."]}``.
- COCO-style JSON (``.json``): ``read_coco``'s format (``data=captions_json`` reads it too).
- A folder: its images, and one captions file named ``captions.csv``, ``captions.jsonl`` or
  ``captions.json``; the file names in it are relative to the folder.

Image file names are relative to the image folder (``paths.images``) and are the images' ids. Each
reader is registered by decorator (``captioning.data.records.register_reader``) under its format name and
suffix; :func:`read_own` picks one by the path it is given.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

from captioning.data import readers  # noqa: F401  (registers read_coco: ".json" files)
from captioning.data.files import read_utf8_text
from captioning.data.records import (
    READERS,
    SUFFIXES,
    DatasetError,
    ImageRecord,
    Problems,
    Row,
    collect_records,
    existing,
    register_reader,
)
from captioning.errors import ConfigError

CSV_COLUMNS = ("image", "caption")
CAPTIONS_STEM = "captions"  # a folder's captions file: captions.csv, captions.jsonl or captions.json
EXAMPLE = (
    "captioning-train experiment=own_data data=own paths.train_captions=my/train.csv "
    "paths.val_captions=my/val.csv paths.images=my/images (docs/guides/own-data.md)"
)


def _text(path: Path) -> str:
    return read_utf8_text(path, DatasetError).removeprefix("\ufeff")  # spreadsheets write a BOM


def _csv_rows(path: Path, report: Problems) -> Iterator[Row]:
    # strict: an unclosed quote is an error, not the rest of the file swallowed into one caption
    reader = csv.reader(io.StringIO(_text(path), newline=""), strict=True)
    start = 1  # the line the next row starts on (a quoted caption may span lines)
    try:
        header = next(reader, None)
        if header is None:
            raise DatasetError(
                f"{path}: empty file; expected a header row 'image,caption' and a row a caption"
            )
        names = [h.strip() for h in header]
        missing = [c for c in CSV_COLUMNS if c not in names]
        if missing:
            raise DatasetError(
                f"{path} line 1: header {header!r:.120} lacks the column(s) {', '.join(map(repr, missing))}; "
                "expected a header row naming 'image' and 'caption'"
            )
        at = {c: names.index(c) for c in CSV_COLUMNS}
        start = reader.line_num + 1
        for row in reader:
            where, start = f"{path} line {start}", reader.line_num + 1
            if not any(field.strip() for field in row):
                continue  # a blank line
            if len(row) <= max(at.values()):
                detail = (
                    f"got {len(row)} field(s) {row!r:.120}; expected {len(names)} (header: {','.join(names)})"
                )
                report("malformed row", where, detail)
                continue
            yield row[at["image"]], row[at["caption"]], where
    except csv.Error as e:  # an unclosed quote, text after a closing quote, a NUL byte
        raise DatasetError(
            f"{path} line {start}: not readable as CSV ({e}); expected comma-separated fields, a quoted one "
            "closed by a quote"
        ) from None


@register_reader("csv", suffixes=(".csv",))
def read_csv(captions: str | Path, image_dir: str | Path, *, on_error: str = "raise") -> list[ImageRecord]:
    """One split from a CSV file with the columns ``image`` and ``caption`` (one row per caption)."""
    report = Problems(captions, on_error)
    path = existing(captions, "a CSV captions file (header 'image,caption')")
    image_dir = existing(image_dir, "the image folder", is_dir=True)
    return collect_records(_csv_rows(path, report), image_dir, report, "its rows")


def _jsonl_rows(path: Path, report: Problems) -> Iterator[Row]:
    for lineno, line in enumerate(_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path} line {lineno}"
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as e:
            report(
                "malformed line",
                where,
                f"malformed JSON at column {e.colno}: {e.msg}; expected one object a line",
            )
            continue
        except RecursionError:
            report(
                "malformed line",
                where,
                "JSON nested deeper than the parser's limit; expected one flat object",
            )
            continue
        expected = "an object with 'image' (str) and 'caption' (str) or 'captions' (list of str)"
        if not isinstance(entry, dict) or "image" not in entry:
            report("malformed entry", where, f"got {entry!r:.120}; expected {expected}")
        elif "captions" in entry:
            if not (isinstance(entry["captions"], list) and entry["captions"]):
                detail = f"'captions' is {entry['captions']!r:.80}; expected a list of at least one caption"
                report("malformed entry", where, detail)
                continue
            for k, raw in enumerate(entry["captions"]):
                yield entry["image"], raw, f"{where} captions[{k}]"
        elif "caption" in entry:
            yield entry["image"], entry["caption"], where
        else:
            report(
                "malformed entry",
                where,
                f"no 'caption' or 'captions' key in {entry!r:.120}; expected {expected}",
            )


@register_reader("jsonl", suffixes=(".jsonl",))
def read_jsonl(captions: str | Path, image_dir: str | Path, *, on_error: str = "raise") -> list[ImageRecord]:
    """One split from a JSON Lines file: an object per line with ``image`` and ``caption`` or ``captions``."""
    report = Problems(captions, on_error)
    path = existing(captions, "a JSON Lines captions file (one object a line)")
    image_dir = existing(image_dir, "the image folder", is_dir=True)
    return collect_records(_jsonl_rows(path, report), image_dir, report, "its lines")


def read_image_folder(folder: str | Path, *, on_error: str = "raise") -> list[ImageRecord]:
    """One split from a folder holding its images and one captions file (``captions.csv``,
    ``captions.jsonl`` or ``captions.json``), read by the reader registered for its suffix."""
    folder = existing(folder, "a folder of images with a captions file", is_dir=True)
    found = [folder / f"{CAPTIONS_STEM}{s}" for s in SUFFIXES if (folder / f"{CAPTIONS_STEM}{s}").is_file()]
    names = ", ".join(f"{CAPTIONS_STEM}{s}" for s in SUFFIXES)
    if len(found) != 1:
        what = (
            "no captions file"
            if not found
            else f"{len(found)} captions files ({', '.join(p.name for p in found)})"
        )
        raise DatasetError(f"{folder}: {what}; expected exactly one of {names}")
    return READERS[SUFFIXES[found[0].suffix]](found[0], folder, on_error=on_error)


def _unset(value: object) -> bool:
    return value is None or (isinstance(value, str) and value.strip() in ("", "???"))


def require_set(paths: dict[str, object], example: str = EXAMPLE) -> None:
    """One ConfigError naming every key of ``paths`` (key -> value) whose value is unset, with an example."""
    missing = [key for key, value in paths.items() if _unset(value)]
    if missing:
        what = " and ".join(missing)
        raise ConfigError(f"{what} {'is' if len(missing) == 1 else 'are'} not set; e.g. {example}")


def read_own(
    captions: str | Path | None,
    image_dir: str | Path | None = None,
    *,
    captions_key: str,
    image_dir_key: str = "paths.images",
    format: str | None = None,
    on_error: str = "raise",
) -> list[ImageRecord]:
    """One split of your own data: ``captions`` a folder (:func:`read_image_folder`) or a captions file
    read by the reader registered for ``format`` (None: for the file's suffix) with its images in
    ``image_dir``. An unset path is one ConfigError naming its key (``captions_key``, ``image_dir_key``)."""
    require_set({captions_key: captions})
    if Path(captions).expanduser().is_dir():
        return read_image_folder(captions, on_error=on_error)
    kinds = ", ".join(SUFFIXES)
    existing(
        captions, f"a captions file ({kinds}) or a folder of images with its captions file ({captions_key})"
    )
    if format is None:
        suffix = Path(captions).suffix.lower()
        if suffix not in SUFFIXES:
            known = ", ".join(f"{s} ({n})" for s, n in SUFFIXES.items())
            raise DatasetError(
                f"{captions}: no reader for the suffix {suffix or '(none)'!r} ({captions_key}); expected one of "
                f"{known}, or a folder holding its images and a captions file"
            )
        format = SUFFIXES[suffix]
    elif format not in READERS:
        raise ConfigError(f"format={format!r}: no such reader; expected one of {', '.join(READERS)}")
    require_set({image_dir_key: image_dir})  # a file's images are in their own folder
    return READERS[format](captions, image_dir, on_error=on_error)
