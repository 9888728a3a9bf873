"""Reading a text file the user gave, with one clear error when it is not UTF-8; writing an output file
whole or not at all."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import IO

from captioning.writes import (
    commit,
    folder_problem,  # noqa: F401  (re-exported: one implementation)
    temp_beside,
)


def read_utf8_text(path: Path, error: type[Exception] = ValueError) -> str:
    """``path`` decoded as UTF-8 (line endings untouched), or one ``error`` naming the file and the byte,
    offset and line of the first that is not UTF-8."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise error(
            f"{path}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}, line {line}); "
            "expected a UTF-8 file (re-encode it, e.g. iconv -f latin1 -t utf-8)"
        ) from None


def write_atomically(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """``write(f)`` into a temp file beside ``path``, then renamed over it (``captioning.writes``' temp
    name and commit: fsync, ``os.replace``, the folder fsync'ed): a failure (a full disk) leaves ``path``
    as it was (no empty or half-written file) and raises the OSError."""
    path = Path(path)
    temp = temp_beside(path)
    try:
        with open(temp, "xb") as f:
            write(f)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    commit(temp, path)  # removes the temp file itself if the rename fails


def write_text_atomically(path: Path, text: str) -> None:
    write_atomically(path, lambda f: f.write(text.encode("utf-8")))
