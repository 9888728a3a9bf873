"""The reader toolkit: what every dataset reader returns, how it reports a bad entry, and its registry.

A reader turns files into ``list[ImageRecord]`` (image id, image path, captions). The helpers here are
public and the readers of ``readers.py`` and ``own.py`` use nothing else, so a new reader gets the same
behaviour by calling them (docs/design/extending.md, "Adding a dataset reader"):

- :class:`Problems`: ``on_error="raise"`` raises one :class:`DatasetError` naming the file, the entry
  and what was expected; ``"skip"`` counts per reason and logs one warning at the end;
- :func:`clean_caption`, :func:`make_record`, :func:`existing`, :func:`load_json`: the checks every
  reader makes (a caption has a word, the image is a regular file inside the image folder, ids unique);
- :func:`build_records`: the loop every reader ends with (entries in, checked records out, the result
  refused when nothing usable is left), and :func:`collect_records`, the whole read-and-report loop of a
  file that lists (image file, caption) rows;
- :func:`register_reader`: registration by decorator in the module that defines the reader (as timm's
  ``@register_model``), under the format name and file suffixes ``data=own`` chooses it by.

File-level problems (file missing, malformed JSON, missing top-level field) always raise.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from captioning.data.files import read_utf8_text
from captioning.data.tokenize import tokenize
from captioning.errors import UserError

_log = logging.getLogger(__name__)

ON_ERROR = ("raise", "skip")


class DatasetError(ValueError, UserError):
    """A dataset file is malformed or inconsistent with the images on disk."""


@dataclass(frozen=True)
class ImageRecord:
    image_id: int | str  # COCO id, Karpathy cocoid/imgid, Flickr8k's filename stem, own data's file name
    path: Path  # absolute path of the image file
    captions: tuple[str, ...]  # raw reference captions, surrounding whitespace stripped
    extra_captions: tuple[str, ...] = ()  # a teacher's, added to the references (data/extra_references.py)


class Problems:
    """Raises on the first problem (``raise``) or counts problems per reason (``skip``).

    ``report(reason, where, detail)``: ``where`` names the file and the entry (``"x.csv line 4"``),
    ``detail`` what was found and what was expected; ``reason`` is the skip count's label."""

    def __init__(self, dataset: str | Path, on_error: str) -> None:
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
        self.dataset = dataset
        self.skip = on_error == "skip"
        self.counts: Counter[str] = Counter()

    def __call__(self, reason: str, where: str, detail: str) -> None:
        if not self.skip:
            raise DatasetError(f"{where}: {detail}")
        self.counts[reason] += 1

    def finish(self, records: list[ImageRecord], what: str) -> list[ImageRecord]:
        """Log the skip counts; refuse an empty result naming the file and why (nothing listed, all skipped)."""
        summary = ", ".join(f"{n} {reason}" for reason, n in sorted(self.counts.items()))
        if not records:
            why = f"all skipped ({summary})" if summary else "none listed"
            raise DatasetError(f"{self.dataset}: no usable image in {what}: {why}; expected at least one")
        if summary:
            _log.warning("%s: skipped %s", self.dataset, summary)
        return records


def is_int(value: object) -> bool:
    """An integer id (``True`` is not one, though Python's bool is an int)."""
    return isinstance(value, int) and not isinstance(value, bool)


def clean_caption(raw: object, report: Problems, where: str) -> str | None:
    """``raw`` stripped, or None (reported) when it is not a string or has no word token."""
    if not isinstance(raw, str):
        report("malformed caption", where, f"caption is {raw!r}; expected a string")
        return None
    if not tokenize(raw):
        report("empty caption", where, f"caption {raw!r} has no word tokens; expected at least one word")
        return None
    return raw.strip()


def make_record(
    image_id: int | str, path: Path, captions: list[str], report: Problems, where: str, folder: Path
) -> ImageRecord | None:
    """The record of one image, or None (reported) when it has no caption, its file name escapes the
    image ``folder`` ("../../etc/passwd" is refused, not read) or its file is missing."""
    # Lexically (".." collapsed, symbolic links not followed): "../../etc/passwd" and "/abs" escape, while
    # a link the data set's owner put inside the folder (a sub-folder on another disk) is theirs to make.
    if not Path(os.path.normpath(path)).is_relative_to(os.path.normpath(folder)):
        report(
            "file name outside the image folder",
            where,
            f"{path} resolves outside {folder}; expected a file in it",
        )
        return None
    if not captions:
        report("image without valid caption", where, "no valid caption; expected at least one")
        return None
    if path.is_dir():
        report("missing image file", where, f"{path} is a folder; expected an image file")
        return None
    if path.exists() and not path.is_file():  # a FIFO would block the loader, /dev/zero never end
        report(
            "image not a regular file",
            where,
            f"{path} is not a regular file (a pipe, device or socket); expected an image file",
        )
        return None
    if not path.is_file():  # a stat per image: cheap enough for COCO-sized sets, no decoding
        report("missing image file", where, f"image file {path} does not exist; expected it on disk")
        return None
    return ImageRecord(image_id=image_id, path=path, captions=tuple(captions))


def existing(path: str | Path, expected: str, is_dir: bool = False) -> Path:
    """``path`` resolved, or one DatasetError saying it is missing (or the wrong kind) and what was expected."""
    path = Path(path).expanduser().resolve()
    if not (path.is_dir() if is_dir else path.is_file()):
        if not path.exists():
            what = "not found"
        elif is_dir:
            what = "is a file, not a folder"
        else:
            what = "is a folder" if path.is_dir() else "is not a regular file"
        raise DatasetError(f"{path}: {what}; expected {expected}")
    return path


def parse_json(text: str, where: str) -> Any:
    """``text`` parsed, or one DatasetError naming ``where``, the line and column (or the nesting limit)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DatasetError(f"{where}: malformed JSON at line {e.lineno} column {e.colno}: {e.msg}") from e
    except RecursionError:
        raise DatasetError(
            f"{where}: JSON nested deeper than the parser's limit ({sys.getrecursionlimit()} levels); "
            "expected an annotation file (a few levels deep)"
        ) from None


def load_json(path: Path, keys: tuple[str, ...]) -> dict[str, Any]:
    """A JSON object file whose top-level ``keys`` are lists, or one DatasetError naming what is wrong."""
    data = parse_json(read_utf8_text(path, DatasetError), str(path))
    if not isinstance(data, dict):
        raise DatasetError(f"{path}: top level is {type(data).__name__}; expected a JSON object")
    for key in keys:
        if not isinstance(data.get(key), list):
            raise DatasetError(f"{path}: top-level field {key!r} missing or not a list; expected a list")
    return data


Entry = tuple[int | str, Path, list[str], str]  # (image id, image path, its clean captions, where)
Row = tuple[object, object, str]  # (image file name, raw caption, where: "file line N")


def build_records(entries: Iterable[Entry], folder: Path, report: Problems, what: str) -> list[ImageRecord]:
    """The loop every reader ends with: one record per entry that passes :func:`make_record`'s checks
    (the others reported), then :meth:`Problems.finish` (``what`` names the listing in its error)."""
    records = []
    for image_id, path, captions, where in entries:
        record = make_record(image_id, path, captions, report, where, folder)
        if record is not None:
            records.append(record)
    return report.finish(records, what)


def collect_records(rows: Iterable[Row], image_dir: Path, report: Problems, what: str) -> list[ImageRecord]:
    """The read-and-report loop of a captions file that lists (image file, caption) rows.

    Images come in first-listed order, each with its captions in file order; the image id is the file
    name as written (relative to ``image_dir``, unique where stems are not: ``cats/a.jpg``,
    ``dogs/a.jpg``). A bad row is reported and dropped, the other rows still read; ``what`` names the
    listing in the "no usable image" error."""
    captions: dict[str, list[str]] = {}
    first_seen: dict[str, str] = {}  # file name -> where it was first listed (the record's "where")
    for name, raw, where in rows:
        if not (isinstance(name, str) and name.strip()):
            report("malformed entry", where, f"image file name is {name!r}; expected a non-empty string")
            continue
        name = name.strip()
        first_seen.setdefault(name, where)
        captions.setdefault(name, [])
        caption = clean_caption(raw, report, where)
        if caption is not None:
            captions[name].append(caption)
    entries = (
        (name, image_dir / name, caps, f"{first_seen[name]} ({name})") for name, caps in captions.items()
    )
    return build_records(entries, image_dir, report, what)


Reader = Callable[..., list[ImageRecord]]  # reader(captions_file, image_dir, *, on_error="raise")
READERS: dict[str, Reader] = {}  # format name -> reader; filled by @register_reader as modules are imported
SUFFIXES: dict[str, str] = {}  # file suffix -> format name: what data=own reads a captions file as


def register_reader(name: str, suffixes: tuple[str, ...] = ()) -> Callable[[Reader], Reader]:
    """Register the decorated captions-file reader under ``name`` and the file ``suffixes`` it reads.

    A registered reader takes ``(captions_file, image_dir, *, on_error)`` and returns the records of
    one split; ``data=own`` picks it by ``format: NAME`` or by the file's suffix. A name or a suffix
    registered twice by different readers is an error (one name, one reader)."""

    def register(reader: Reader) -> Reader:
        taken = [f"name {name!r}"] if READERS.get(name, reader) is not reader else []
        taken += [f"suffix {s!r}" for s in suffixes if SUFFIXES.get(s, name) != name]
        if taken:
            raise ValueError(f"{reader.__qualname__}: {' and '.join(taken)} already registered")
        READERS[name] = reader
        SUFFIXES.update(dict.fromkeys(suffixes, name))
        return reader

    return register
