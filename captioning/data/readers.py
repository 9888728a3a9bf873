"""Dataset readers: COCO captions, Karpathy split JSON and Flickr8k text files -> ``list[ImageRecord]``.

Every reader validates what it returns (caption has a word token, image file exists, ids unique) and
either raises :class:`DatasetError` naming the file, the entry and what was expected (``on_error="raise"``)
or skips the bad caption/entry and logs one warning with counts per reason (``on_error="skip"``).
File-level problems (file missing, malformed JSON, missing top-level field) always raise.
Only entries of the requested split are validated, so skip counts describe that split alone.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pycocotools.coco import COCO

from captioning.data.files import read_utf8_text
from captioning.data.tokenize import tokenize
from captioning.errors import UserError

_log = logging.getLogger(__name__)

ON_ERROR = ("raise", "skip")
KARPATHY_SPLITS = ("train", "val", "test", "restval")
# Flickr8k split names -> the original split-list files; "val" is the usual name for "dev".
FLICKR8K_SPLIT_FILES = {
    "train": "Flickr_8k.trainImages.txt",
    "dev": "Flickr_8k.devImages.txt",
    "val": "Flickr_8k.devImages.txt",
    "test": "Flickr_8k.testImages.txt",
}
FLICKR8K_TOKEN_FILE = "Flickr8k.token.txt"
FLICKR8K_FOLDER = "the Flickr8k folder (set paths.flickr8k=PATH or FLICKR8K_ROOT)"
FLICKR8K_IMAGE_DIR = "Flicker8k_Dataset"  # sic: the original distribution misspells it


class DatasetError(ValueError, UserError):
    """A dataset file is malformed or inconsistent with the images on disk."""


@dataclass(frozen=True)
class ImageRecord:
    image_id: int | str  # COCO id, Karpathy cocoid/imgid, or filename stem for Flickr8k
    path: Path  # absolute path of the image file
    captions: tuple[str, ...]  # raw reference captions, surrounding whitespace stripped


class _Problems:
    """Raises on the first problem (``raise``) or counts problems per reason (``skip``)."""

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


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _clean_caption(raw: object, report: _Problems, where: str) -> str | None:
    if not isinstance(raw, str):
        report("malformed caption", where, f"caption is {raw!r}; expected a string")
        return None
    if not tokenize(raw):
        report("empty caption", where, f"caption {raw!r} has no word tokens; expected at least one word")
        return None
    return raw.strip()


def _make_record(
    image_id: int | str, path: Path, captions: list[str], report: _Problems, where: str, folder: Path
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


def _existing(path: str | Path, expected: str, is_dir: bool = False) -> Path:
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


def _load_json(path: Path, keys: tuple[str, ...]) -> dict[str, Any]:
    text = read_utf8_text(path, DatasetError)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DatasetError(f"{path}: malformed JSON at line {e.lineno} column {e.colno}: {e.msg}") from e
    except RecursionError:
        raise DatasetError(
            f"{path}: JSON nested deeper than the parser's limit ({sys.getrecursionlimit()} levels); "
            "expected an annotation file (a few levels deep)"
        ) from None
    if not isinstance(data, dict):
        raise DatasetError(f"{path}: top level is {type(data).__name__}; expected a JSON object")
    for key in keys:
        if not isinstance(data.get(key), list):
            raise DatasetError(f"{path}: top-level field {key!r} missing or not a list; expected a list")
    return data


def read_coco(
    annotations: str | Path, image_dir: str | Path, *, on_error: str = "raise"
) -> list[ImageRecord]:
    """Read a COCO captions file (``captions_train2014.json`` style); records sorted by image id.

    Images are ``image_dir / images[i]["file_name"]``; captions keep the annotation file's order.
    """
    report = _Problems(annotations, on_error)
    ann_file = _existing(annotations, "a COCO captions JSON file")
    image_dir = _existing(image_dir, "the image folder", is_dir=True)
    data = _load_json(ann_file, ("images", "annotations"))

    images: dict[int, dict[str, Any]] = {}
    for i, img in enumerate(data["images"]):
        where = f"{ann_file} images[{i}]"
        if not (isinstance(img, dict) and _is_int(img.get("id")) and isinstance(img.get("file_name"), str)):
            report("malformed entry", where, f"got {img!r:.120}; expected {{'id': int, 'file_name': str}}")
        elif img["id"] in images:
            report("duplicate id", where, f"image id {img['id']} appears twice; expected unique image ids")
        else:
            images[img["id"]] = img

    anns: list[dict[str, Any]] = []
    ann_ids: set[Any] = set()
    for j, ann in enumerate(data["annotations"]):
        where = f"{ann_file} annotations[{j}]"
        if not (isinstance(ann, dict) and _is_int(ann.get("id")) and "image_id" in ann and "caption" in ann):
            expected = "{'id': int, 'image_id': int, 'caption': str}"
            report("malformed entry", where, f"got {ann!r:.120}; expected {expected}")
        elif ann["id"] in ann_ids:
            report("duplicate id", where, f"annotation id {ann['id']} appears twice; expected unique ids")
        elif ann["image_id"] not in images:
            report("unknown image", where, f"image_id {ann['image_id']!r} is not listed in 'images'")
        else:
            caption = _clean_caption(ann["caption"], report, f"{where} (image id {ann['image_id']})")
            if caption is not None:
                ann_ids.add(ann["id"])
                anns.append({**ann, "caption": caption})

    coco = COCO()  # no file: we parsed and validated the JSON ourselves for clear errors
    coco.dataset = {"images": list(images.values()), "annotations": anns}
    with contextlib.redirect_stdout(io.StringIO()):  # createIndex prints progress lines
        coco.createIndex()

    records = []
    for image_id in sorted(coco.getImgIds()):
        captions = [ann["caption"] for ann in coco.imgToAnns[image_id]]
        path = image_dir / coco.imgs[image_id]["file_name"]
        record = _make_record(image_id, path, captions, report, f"{ann_file} image id {image_id}", image_dir)
        if record is not None:
            records.append(record)
    return report.finish(records, "'images'")


def read_karpathy(
    dataset_json: str | Path,
    image_root: str | Path,
    split: str,
    *,
    include_restval: bool = True,
    on_error: str = "raise",
) -> list[ImageRecord]:
    """Read one split of a Karpathy split file (``dataset_coco.json``, ``dataset_flickr8k.json``).

    Images are ``image_root / filepath / filename`` (``filepath`` is absent for Flickr).
    ``split="train"`` also returns the ``restval`` images unless ``include_restval=False``: the
    standard Karpathy practice trains on train + restval (113k COCO images).
    Ids are ``cocoid`` when present, else ``imgid``. Records keep the file's order.
    """
    if split not in KARPATHY_SPLITS:
        raise ValueError(f"split must be one of {KARPATHY_SPLITS}, got {split!r}")
    report = _Problems(dataset_json, on_error)
    json_file = _existing(dataset_json, "a Karpathy split JSON file (dataset_*.json)")
    image_root = _existing(image_root, "the image root folder", is_dir=True)
    data = _load_json(json_file, ("images",))
    wanted = {split, "restval"} if split == "train" and include_restval else {split}

    records: list[ImageRecord] = []
    seen: set[int] = set()
    matched = 0  # entries of the wanted split(s), valid or not
    for i, entry in enumerate(data["images"]):
        where = f"{json_file} images[{i}]"
        if not (isinstance(entry, dict) and isinstance(entry.get("split"), str)):
            report("malformed entry", where, f"got {entry!r:.120}; expected an object with a 'split' string")
            continue
        if entry["split"] not in wanted:
            continue
        matched += 1
        image_id = entry.get("cocoid", entry.get("imgid"))
        filepath = entry.get("filepath", "")
        sentences = entry.get("sentences")
        if not (
            _is_int(image_id)
            and isinstance(entry.get("filename"), str)
            and isinstance(filepath, str)
            and isinstance(sentences, list)
        ):
            expected = "'cocoid' or 'imgid' (int), 'filename' (str), 'sentences' (list)"
            report("malformed entry", where, f"got {entry!r:.120}; expected {expected}")
            continue
        where = f"{where} (id {image_id})"
        if image_id in seen:
            report("duplicate id", where, f"id {image_id} appears twice; expected unique ids")
            continue
        seen.add(image_id)
        captions = []
        for k, sentence in enumerate(sentences):
            raw = sentence.get("raw") if isinstance(sentence, dict) else None
            caption = _clean_caption(raw, report, f"{where} sentences[{k}]['raw']")
            if caption is not None:
                captions.append(caption)
        path = image_root / filepath / entry["filename"]
        record = _make_record(image_id, path, captions, report, where, image_root)
        if record is not None:
            records.append(record)
    if not matched:
        found = Counter(
            e["split"] for e in data["images"] if isinstance(e, dict) and isinstance(e.get("split"), str)
        )
        listing = ", ".join(f"{name!r} ({n})" for name, n in sorted(found.items())) or "none"
        raise DatasetError(
            f"{json_file}: no image has split {' or '.join(map(repr, sorted(wanted)))}; split names found: "
            f"{listing}; expected one of {', '.join(KARPATHY_SPLITS)}"
        )
    return report.finish(records, f"split {split!r}")


def _read_flickr8k_captions(token_file: Path, report: _Problems) -> dict[str, list[tuple[int, int, str]]]:
    """``<image>.jpg#<k>\\t<caption>`` lines -> {image name: [(k, line number, caption), ...]}."""
    captions: dict[str, list[tuple[int, int, str]]] = {}
    for lineno, line in enumerate(read_utf8_text(token_file, DatasetError).split("\n"), start=1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        key, tab, caption = line.partition("\t")
        name, hash_, k = key.rpartition("#")
        if not (tab and hash_ and name and k.isdigit()):
            detail = f"got {line!r:.120}; expected '<image>.jpg#<k>\\t<caption>'"
            report("malformed line", f"{token_file} line {lineno}", detail)
            continue
        captions.setdefault(name, []).append((int(k), lineno, caption))
    return captions


def read_flickr8k(root: str | Path, split: str, *, on_error: str = "raise") -> list[ImageRecord]:
    """Read a Flickr8k split from the original text files under ``root``; records keep the split list's order.

    ``split`` is ``train``, ``dev`` (alias ``val``) or ``test``. Ids are filename stems; captions are
    ordered by their ``#k`` index. Only the token-file lines of the split's images are checked beyond
    their line format.
    """
    if split not in FLICKR8K_SPLIT_FILES:
        raise ValueError(f"split must be one of {tuple(FLICKR8K_SPLIT_FILES)}, got {split!r}")
    report = _Problems(Path(root) / FLICKR8K_SPLIT_FILES[split], on_error)
    root = _existing(root, FLICKR8K_FOLDER, is_dir=True)
    split_file = _existing(root / FLICKR8K_SPLIT_FILES[split], f"the Flickr8k {split!r} split list")
    token_file = _existing(root / FLICKR8K_TOKEN_FILE, "the Flickr8k caption file")
    image_dir = _existing(root / FLICKR8K_IMAGE_DIR, "the Flickr8k image folder", is_dir=True)
    all_captions = _read_flickr8k_captions(token_file, report)

    records: list[ImageRecord] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(read_utf8_text(split_file, DatasetError).splitlines(), start=1):
        name = line.strip()
        if not name:
            continue
        where = f"{split_file} line {lineno} ({name})"
        if name in seen:
            report("duplicate id", where, f"already listed on line {seen[name]}; expected unique names")
            continue
        seen[name] = lineno
        entries = sorted(all_captions.get(name, []))
        if not entries:
            report("image without caption", where, f"no '{name}#<k>' line in {token_file}; expected 5")
            continue
        captions, indices = [], set()
        for k, cap_line, raw in entries:
            cap_where = f"{token_file} line {cap_line} ({name}#{k})"
            if k in indices:
                report("duplicate caption", cap_where, f"caption index #{k} repeats; expected unique indices")
                continue
            indices.add(k)
            caption = _clean_caption(raw, report, cap_where)
            if caption is not None:
                captions.append(caption)
        record = _make_record(Path(name).stem, image_dir / name, captions, report, where, image_dir)
        if record is not None:
            records.append(record)
    return report.finish(records, f"the {split!r} split list")
