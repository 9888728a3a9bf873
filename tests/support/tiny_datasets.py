"""Tiny copies of datasets on disk, in their original layouts, for the readers' tests."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from PIL import Image


def jpeg(path: Path) -> None:
    """An 8x8 red JPEG at ``path`` (its folders made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), (200, 30, 30)).save(path, "JPEG")


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


def flickr8k_copy(tmp_path: Path) -> Path:
    """A 3-image Flickr8k as the original zips unpack beside each other: ``Flicker8k_Dataset/`` (sic) and
    the text files (train 222_b, 111_a; dev 333_c; no test list), with the original token file's bogus
    ``.jpg.1`` line."""
    root = tmp_path.resolve() / "flickr8k"
    for name in ("111_a.jpg", "222_b.jpg", "333_c.jpg"):
        jpeg(root / "Flicker8k_Dataset" / name)
    token_lines = [
        "222_b.jpg#1\tA second caption for b .",
        "111_a.jpg#0\tA child climbs stairs .",
        "222_b.jpg#0\tA dog in the snow .",
        "111_a.jpg#1\tA girl in pink .",
        "333_c.jpg#0\tA man on a bike .",
        "999_x.jpg.1#0\tbogus entry of the original file, not in any split",
    ]
    (root / "Flickr8k.token.txt").write_text("\n".join(token_lines) + "\n", encoding="utf-8")
    (root / "Flickr_8k.trainImages.txt").write_text("222_b.jpg\n111_a.jpg\n", encoding="utf-8")
    (root / "Flickr_8k.devImages.txt").write_text("333_c.jpg\n", encoding="utf-8")
    return root


def warnings_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The WARNING records' messages: a reader's skip report."""
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
