"""The file arguments of the sub-commands checked before anything heavy is imported.

``captioning.cli.main`` calls :func:`problems` between parsing and the sub-command's ``run``, which is
where torch, Lightning and Hydra load (seconds): a misspelt ``--checkpoint`` or image path is one line,
with the nearest entries of its folder (``did you mean ...?``), in well under a second. Only what is
certain from the path alone is refused here (a file that does not exist, a folder where a file is
expected); what a file holds is checked when it is read.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

GLOB_CHARS = set("*?[")


def _entries(folder: Path) -> list[str]:
    try:
        with os.scandir(folder) as it:
            return [e.name for _, e in zip(range(10_000), it)]  # a camera folder: its first 10,000
    except OSError:
        return []


def did_you_mean(path: Path) -> str:
    """``; did you mean X?`` for the nearest existing path to a missing ``path`` (its first missing part
    replaced by the closest entry of the folder above), or ''."""
    parts = path.parts
    for i in range(len(parts)):
        prefix = Path(*parts[: i + 1])
        try:
            exists = prefix.exists()
        except OSError:  # a name too long to look up
            return ""
        if exists:
            continue
        folder = Path(*parts[:i]) if i else Path(".")
        close = difflib.get_close_matches(parts[i], _entries(folder), n=1, cutoff=0.6)
        if not close:
            return ""
        fixed = Path(*parts[:i], close[0], *parts[i + 1 :])
        return f"; did you mean {fixed}?"
    return ""


def file_problem(path: Path, what: str) -> str | None:
    """Why ``path`` cannot be the ``what`` (e.g. 'checkpoint file') to read, judged from the path alone: it
    does not exist (with the nearest names), it is a folder or not a regular file; else None."""
    try:
        if path.is_dir():
            return f"{path}: is a folder, not a {what}"
        if path.exists() and not path.is_file():
            return f"{path}: is not a regular file (a pipe, device or socket); expected a {what}"
        if not path.exists():
            return f"{path}: no such {what}{did_you_mean(path)}"
    except OSError:  # ENAMETOOLONG and the like: reported by the reader, which names the reason
        return None
    return None


def image_problem(item: str) -> str | None:
    """An image argument (file, folder or glob) that names nothing: no such file, folder or match."""
    path = Path(item)
    if not item.strip() or GLOB_CHARS & set(item):
        return None  # an empty argument and a glob are reported by `caption` itself
    try:
        if path.exists():
            return None
    except OSError:
        return None
    return f"{path}: no such image file or folder{did_you_mean(path)}"


def _checkpoints(args) -> list[Path]:
    value = getattr(args, "checkpoint", None)
    if value is None:
        return []
    return [Path(v) for v in (value if isinstance(value, list) else [value])]


def resolve_checkpoints(args) -> list[str]:
    """Every ``--checkpoint`` of ``args`` as a path, in place: a zoo model's name becomes its file (SHA-256
    checked, captioning/zoo.py), a path stays as given. Returns one line per value that is neither a file
    nor a zoo name (with the nearest names), [] when all resolved."""
    from captioning.zoo import ZooError, checkpoint_path

    value = getattr(args, "checkpoint", None)
    if value is None:
        return []
    lines, paths = [], []
    for text in value if isinstance(value, list) else [value]:
        try:
            paths.append(checkpoint_path(str(text)))
        except ZooError as err:
            lines.append(str(err))
    if not lines:
        args.checkpoint = paths if isinstance(value, list) else paths[0]
    return lines


def problems(args) -> list[str]:
    """The lines to print before refusing the command ``args`` (parsed), or [] to run it.

    Every ``--checkpoint`` is resolved (a zoo name to its file: :func:`resolve_checkpoints`) and must be
    a file. Image arguments are refused here only when none of them names anything, so that one missing
    photo among many is reported beside the captions of the others, as before."""
    lines = resolve_checkpoints(args) or [
        p for c in _checkpoints(args) if (p := file_problem(c, "checkpoint file"))
    ]
    images = getattr(args, "images", None)
    if images:
        missing = [p for item in images if (p := image_problem(item))]
        if len(missing) == len(images):
            lines += missing
    return lines
