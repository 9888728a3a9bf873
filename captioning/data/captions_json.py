"""``data=captions_json``: your own COCO-format captions file per split + an image folder.

The reading is :func:`captioning.data.readers.read_coco`'s; this only turns an unset path into one line
naming the short key to set (``paths.train_json``, ``paths.val_json``, ``paths.images``) and a command
that sets all three, instead of an error about ``data.train.records.annotations``.
"""

from __future__ import annotations

from pathlib import Path

from captioning.data.readers import ImageRecord, read_coco
from captioning.errors import ConfigError

EXAMPLE = (
    "captioning-train experiment=own_data paths.train_json=my/train.json paths.val_json=my/val.json "
    "paths.images=my/images (docs/guides/own-data.md)"
)


def _unset(value: object) -> bool:
    return value is None or (isinstance(value, str) and value.strip() in ("", "???"))


def read_captions_json(
    annotations: str | Path | None,
    image_dir: str | Path | None,
    *,
    annotations_key: str,
    image_dir_key: str = "paths.images",
    on_error: str = "raise",
) -> list[ImageRecord]:
    """``read_coco(annotations, image_dir)``, or a :class:`ConfigError` naming the unset keys."""
    missing = [
        key for key, value in ((annotations_key, annotations), (image_dir_key, image_dir)) if _unset(value)
    ]
    if missing:
        what = " and ".join(missing)
        raise ConfigError(f"{what} {'is' if len(missing) == 1 else 'are'} not set; e.g. {EXAMPLE}")
    return read_coco(annotations, image_dir, on_error=on_error)
