"""``data=captions_json``: your own COCO-format captions file per split + an image folder.

The reading is :func:`captioning.data.readers.read_coco`'s; this only turns an unset path into one line
naming the short key to set (``paths.train_json``, ``paths.val_json``, ``paths.images``) and a command
that sets all three, instead of an error about ``data.train.records.annotations``. ``data=own`` reads
the same files (and CSV, JSON Lines, folders) from ``paths.train_captions`` / ``paths.val_captions``.
"""

from __future__ import annotations

from pathlib import Path

from captioning.data.own import require_set
from captioning.data.readers import ImageRecord, read_coco

EXAMPLE = (
    "captioning-train experiment=own_data paths.train_json=my/train.json paths.val_json=my/val.json "
    "paths.images=my/images (docs/guides/own-data.md)"
)


def read_captions_json(
    annotations: str | Path | None,
    image_dir: str | Path | None,
    *,
    annotations_key: str,
    image_dir_key: str = "paths.images",
    on_error: str = "raise",
) -> list[ImageRecord]:
    """``read_coco(annotations, image_dir)``, or a :class:`ConfigError` naming the unset keys."""
    require_set({annotations_key: annotations, image_dir_key: image_dir}, EXAMPLE)
    return read_coco(annotations, image_dir, on_error=on_error)
