"""Extra reference captions for training images: a teacher's captions distilled into a student.

Sequence-level knowledge distillation (Kim & Rush 2016, "Sequence-Level Knowledge Distillation") trains
the student on what the teacher *says*, its decoded caption, rather than on its per-word distribution.
Here the teacher is anything that writes a COCO results file for the training split, e.g. an ensemble
decoded with consensus reranking (``captioning evaluate --checkpoint A --checkpoint B ... split=train
rerank=consensus``; the reranker never lets an image vote for itself, ``CaptionBank.nearest``). Its
captions join each image's human references:

* under cross-entropy (``train_items: pairs``) each one is one more (image, caption) pair per epoch,
  ``copies`` times; with Flickr8k's 5 references and ``copies=1``, 1 pair in 6 is the teacher's;
* under self-critical training (``train_items: images``) they are references of the CIDEr-D reward.

They are kept apart from the people's captions (``ImageRecord.extra_captions``), and the vocabulary is
counted from the people's alone (``CaptionSource.vocabulary_captions``): the teacher's words are already in
it, and its counts would only reorder it, so the student keeps the vocabulary of every model trained on
the data without a teacher (``init_from`` one of them, ensembles and reranking with them).

The file must describe exactly the split it is added to: an image id the split does not have is refused
(a dev-split file given here would train on dev captions), and so is a training image the file leaves
out (some images would get more pairs than others without anyone having chosen it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from captioning.data.files import read_utf8_text
from captioning.data.records import DatasetError, ImageRecord, Problems, clean_caption, existing, parse_json


def read_teacher_captions(path: str | Path) -> dict[int | str, list[str]]:
    """A COCO results file ``[{"image_id": ..., "caption": "..."}, ...]`` as image id -> its captions (in
    file order), or one DatasetError naming the file, the entry and what was expected."""
    path = existing(path, "a COCO results file of the training split ([{image_id, caption}, ...])")
    entries = parse_json(read_utf8_text(path, DatasetError), str(path))
    if not isinstance(entries, list) or not entries:
        raise DatasetError(
            f"{path}: expected a non-empty JSON list of {{image_id, caption}} (a COCO results file)"
        )
    report = Problems(path, "raise")
    captions: dict[int | str, list[str]] = {}
    for n, entry in enumerate(entries):
        where = f"{path} entry {n}"
        if not isinstance(entry, dict) or "image_id" not in entry or "caption" not in entry:
            raise DatasetError(f"{where}: {entry!r:.80}; expected an object with image_id and caption")
        image_id = entry["image_id"]
        if not isinstance(image_id, int | str) or isinstance(image_id, bool):
            raise DatasetError(f"{where}: image_id {image_id!r}; expected an integer or a string")
        caption = clean_caption(entry["caption"], report, where)  # raises on a non-string or wordless one
        captions.setdefault(image_id, []).append(caption)
    return captions


def add_references(records: Sequence[ImageRecord], path: str | Path, copies: int) -> list[ImageRecord]:
    """``records`` with the captions of the results file ``path`` appended to each image's references,
    ``copies`` times each. Every image must appear in the file, and the file must name no other image."""
    if isinstance(copies, bool) or not isinstance(copies, int) or copies < 1:
        raise ValueError(f"extra_copies={copies!r}: expected an integer >= 1")
    teacher = read_teacher_captions(path)
    ids = {r.image_id for r in records}
    unknown = sorted((k for k in teacher if k not in ids), key=repr)
    if unknown:
        raise DatasetError(
            f"{path}: {len(unknown)} image id(s) not in this split's {len(ids)} images, e.g. {unknown[:3]}; "
            "expected a results file of this split (another split's captions would leak into training)"
        )
    missing = sorted((k for k in ids if k not in teacher), key=repr)
    if missing:
        raise DatasetError(
            f"{path}: no caption for {len(missing)} of this split's {len(ids)} images, e.g. {missing[:3]}; "
            "expected one or more for every image"
        )
    return [
        replace(r, extra_captions=r.extra_captions + tuple(teacher[r.image_id]) * copies) for r in records
    ]
