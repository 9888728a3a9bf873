"""Dataset readers of the public data sets: COCO captions, Karpathy split JSON and Flickr8k text files ->
``list[ImageRecord]``; your own captions (CSV, JSON Lines, a folder) are read by ``own.py``.

Every reader validates what it returns (caption has a word token, image file exists, ids unique) with
the toolkit of ``records.py`` and either raises :class:`DatasetError` naming the file, the entry and
what was expected (``on_error="raise"``) or skips the bad caption/entry and logs one warning with counts
per reason (``on_error="skip"``). File-level problems (file missing, malformed JSON, missing top-level
field) always raise. Only entries of the requested split are validated, so skip counts describe that
split alone.
"""

from __future__ import annotations

import contextlib
import io
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pycocotools.coco import COCO

from captioning.data.files import read_utf8_text
from captioning.data.records import (
    ON_ERROR,  # noqa: F401  (re-exported: readers' callers import these from here)
    DatasetError,
    Entry,
    ImageRecord,
    Problems,
    build_records,
    clean_caption,
    existing,
    is_int,
    load_json,
    register_reader,
)

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
# Where the two zips of the original distribution put their files, as copies are usually unpacked: the
# text files beside the image folder or in their own Flickr8k_text/; the images in Flicker8k_Dataset/ or,
# unpacked into a folder named after the zip, Flickr8k_Dataset/Flicker8k_Dataset/ (the first found wins).
FLICKR8K_TEXT_DIRS = (".", "Flickr8k_text")
FLICKR8K_IMAGE_DIRS = (FLICKR8K_IMAGE_DIR, f"Flickr8k_Dataset/{FLICKR8K_IMAGE_DIR}", "Flickr8k_Dataset")


def flickr8k_file(root: str | Path, name: str) -> Path:
    """``name`` (a text file, or one of :data:`FLICKR8K_IMAGE_DIRS`' folders for ``FLICKR8K_IMAGE_DIR``)
    where this copy of Flickr8k has it; where the original layout puts it when the copy has none."""
    root = Path(root).expanduser()
    places = (
        FLICKR8K_IMAGE_DIRS if name == FLICKR8K_IMAGE_DIR else [f"{d}/{name}" for d in FLICKR8K_TEXT_DIRS]
    )
    for place in places:
        if (root / place).exists():
            return root / place
    return root / name


@register_reader("coco", suffixes=(".json",))
def read_coco(
    annotations: str | Path, image_dir: str | Path, *, on_error: str = "raise"
) -> list[ImageRecord]:
    """Read a COCO captions file (``captions_train2014.json`` style); records sorted by image id.

    Images are ``image_dir / images[i]["file_name"]``; captions keep the annotation file's order.
    """
    report = Problems(annotations, on_error)
    ann_file = existing(annotations, "a COCO captions JSON file")
    image_dir = existing(image_dir, "the image folder", is_dir=True)
    data = load_json(ann_file, ("images", "annotations"))

    images: dict[int, dict[str, Any]] = {}
    for i, img in enumerate(data["images"]):
        where = f"{ann_file} images[{i}]"
        if not (isinstance(img, dict) and is_int(img.get("id")) and isinstance(img.get("file_name"), str)):
            report("malformed entry", where, f"got {img!r:.120}; expected {{'id': int, 'file_name': str}}")
        elif img["id"] in images:
            report("duplicate id", where, f"image id {img['id']} appears twice; expected unique image ids")
        else:
            images[img["id"]] = img

    anns: list[dict[str, Any]] = []
    ann_ids: set[Any] = set()
    for j, ann in enumerate(data["annotations"]):
        where = f"{ann_file} annotations[{j}]"
        if not (isinstance(ann, dict) and is_int(ann.get("id")) and "image_id" in ann and "caption" in ann):
            expected = "{'id': int, 'image_id': int, 'caption': str}"
            report("malformed entry", where, f"got {ann!r:.120}; expected {expected}")
        elif ann["id"] in ann_ids:
            report("duplicate id", where, f"annotation id {ann['id']} appears twice; expected unique ids")
        elif ann["image_id"] not in images:
            report("unknown image", where, f"image_id {ann['image_id']!r} is not listed in 'images'")
        else:
            caption = clean_caption(ann["caption"], report, f"{where} (image id {ann['image_id']})")
            if caption is not None:
                ann_ids.add(ann["id"])
                anns.append({**ann, "caption": caption})

    coco = COCO()  # no file: we parsed and validated the JSON ourselves for clear errors
    coco.dataset = {"images": list(images.values()), "annotations": anns}
    with contextlib.redirect_stdout(io.StringIO()):  # createIndex prints progress lines
        coco.createIndex()

    entries = (
        (
            i,
            image_dir / coco.imgs[i]["file_name"],
            [a["caption"] for a in coco.imgToAnns[i]],
            f"{ann_file} image id {i}",
        )
        for i in sorted(coco.getImgIds())
    )
    return build_records(entries, image_dir, report, "'images'")


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
    report = Problems(dataset_json, on_error)
    json_file = existing(dataset_json, "a Karpathy split JSON file (dataset_*.json)")
    image_root = existing(image_root, "the image root folder", is_dir=True)
    data = load_json(json_file, ("images",))
    wanted = {split, "restval"} if split == "train" and include_restval else {split}

    entries = _karpathy_entries(data["images"], json_file, image_root, wanted, report)
    return build_records(entries, image_root, report, f"split {split!r}")


def _karpathy_entries(
    images: list, json_file: Path, image_root: Path, wanted: set[str], report: Problems
) -> Iterator[Entry]:
    """The entries of the ``wanted`` splits, checked; one error at the end when no image has them."""
    seen: set[int] = set()
    matched = 0  # entries of the wanted split(s), valid or not
    for i, entry in enumerate(images):
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
            is_int(image_id)
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
            caption = clean_caption(raw, report, f"{where} sentences[{k}]['raw']")
            if caption is not None:
                captions.append(caption)
        yield image_id, image_root / filepath / entry["filename"], captions, where
    if not matched:
        found = Counter(e["split"] for e in images if isinstance(e, dict) and isinstance(e.get("split"), str))
        listing = ", ".join(f"{name!r} ({n})" for name, n in sorted(found.items())) or "none"
        raise DatasetError(
            f"{json_file}: no image has split {' or '.join(map(repr, sorted(wanted)))}; split names found: "
            f"{listing}; expected one of {', '.join(KARPATHY_SPLITS)}"
        )


def _read_flickr8k_captions(token_file: Path, report: Problems) -> dict[str, list[tuple[int, int, str]]]:
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

    The text files may sit beside the image folder or in ``Flickr8k_text/``; the images in
    ``Flicker8k_Dataset/`` or ``Flickr8k_Dataset/Flicker8k_Dataset/`` (:func:`flickr8k_file`).

    ``split`` is ``train``, ``dev`` (alias ``val``) or ``test``. Ids are filename stems; captions are
    ordered by their ``#k`` index. Only the token-file lines of the split's images are checked beyond
    their line format.
    """
    if split not in FLICKR8K_SPLIT_FILES:
        raise ValueError(f"split must be one of {tuple(FLICKR8K_SPLIT_FILES)}, got {split!r}")
    report = Problems(flickr8k_file(root, FLICKR8K_SPLIT_FILES[split]), on_error)
    root = existing(root, FLICKR8K_FOLDER, is_dir=True)
    beside = " (or in Flickr8k_text/)"
    split_file = existing(
        flickr8k_file(root, FLICKR8K_SPLIT_FILES[split]), f"the Flickr8k {split!r} split list{beside}"
    )
    token_file = existing(flickr8k_file(root, FLICKR8K_TOKEN_FILE), f"the Flickr8k caption file{beside}")
    image_dir = existing(
        flickr8k_file(root, FLICKR8K_IMAGE_DIR),
        f"the Flickr8k image folder (or {' or '.join(FLICKR8K_IMAGE_DIRS[1:])})",
        is_dir=True,
    )
    all_captions = _read_flickr8k_captions(token_file, report)

    entries = _flickr8k_entries(split_file, token_file, image_dir, all_captions, report)
    return build_records(entries, image_dir, report, f"the {split!r} split list")


def _flickr8k_entries(
    split_file: Path, token_file: Path, image_dir: Path, all_captions: dict, report: Problems
) -> Iterator[Entry]:
    """The split list's images, each with its captions in ``#k`` order, checked."""
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
            caption = clean_caption(raw, report, cap_where)
            if caption is not None:
                captions.append(caption)
        yield Path(name).stem, image_dir / name, captions, where
