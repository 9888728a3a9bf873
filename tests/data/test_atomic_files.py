"""Output files (captioning.data.files) are written whole or not at all."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from captioning.data.files import write_text_atomically


def test_an_output_file_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "scores.json"
    target.write_text("old")

    def full_disk(f):
        f.write(b"{")
        raise OSError(errno.ENOSPC, "No space left on device")

    from captioning.data.files import write_atomically

    with pytest.raises(OSError, match="No space left"):
        write_atomically(target, full_disk)
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["scores.json"]
    write_text_atomically(target, "new")
    assert target.read_text() == "new"
