"""Reading a text file the user gave, with one clear error when it is not UTF-8."""

from __future__ import annotations

from pathlib import Path


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
