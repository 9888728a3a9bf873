"""Writing a file the user named: never over an input, a model or a device; whole or not at all.

Every command that writes a path it was given (``captioning export``, ``bank``, ``tune``, ``plot``,
``score``) builds an :class:`Output` with :func:`output` *before* its work, so an unusable path fails in a
second instead of after an hour's build, and writes it through :meth:`Output.replacing` (or
``write_text`` / ``write_bytes``). Refused, with one :class:`OutputError` line naming the path and what
was expected:

* a folder, or a path whose folder cannot be created or is not writable;
* anything that is not a regular file: a device (``/dev/null``), a pipe, a socket. Renaming a new file
  over it would replace the device itself with a regular file;
* an input of the same command: the same file, also through a symbolic or hard link;
* a model file: a training checkpoint (torch's zip or pickle), a weights-only export, a caption bank
  or any other safetensors file, unless it is the kind being written (an export replaces an export, a
  bank a bank);
* for a fixed format, a name without its suffix (``an export is a .safetensors file``).

Symbolic links are written *through*: the file a link points to is replaced and the link is kept (a
``last.ckpt`` link keeps pointing at its checkpoint), and the checks above apply to that file.

Writes are atomic: a temp file beside the target (the same file system; it keeps the target's suffix,
so a writer that picks the format by name, like matplotlib, writes the right one), flushed and fsync'ed,
then ``os.replace``'d over the target and the folder fsync'ed. A failure (a full disk) leaves the old
file as it was and no temp file behind. A replaced file keeps its permissions; a new one gets the
umask's. This module imports nothing from the rest of the project.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import uuid
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

EXPORT_FORMAT = "captioning-export/1"  # the safetensors header "format" of a weights-only export
# The safetensors header entry of a caption bank: its name before 0.3, which files keep.
BANK_KEY = "caption_memory"

TRAINING_CHECKPOINT = "a training checkpoint"
EXPORT = "a weights-only export"
BANK = "a caption bank"
SAFETENSORS = "a safetensors file (model weights?)"

MAX_HEADER = 512 * 2**20  # a caption bank's header holds every caption: tens of MB for COCO


class OutputError(ValueError):
    """An output path that cannot or must not be written; the message names it and what was expected."""


def model_kind(path: str | Path) -> str | None:
    """What model file ``path`` holds (one of the kinds above), judged by its bytes; None for anything
    else (a missing, empty or unreadable file, JSON, an image ...)."""
    try:
        with open(path, "rb") as f:
            head = f.read(9)
            if head[:4] == b"PK\x03\x04":  # torch's zip format: an archive holding a data.pkl
                with zipfile.ZipFile(f) as archive:
                    names = archive.namelist()
                return TRAINING_CHECKPOINT if any(n.endswith("data.pkl") for n in names) else None
            if head[:1] == b"\x80":  # a pickle protocol mark: torch's legacy format
                return TRAINING_CHECKPOINT
            if len(head) < 9 or head[8:9] != b"{":
                return None
            size = int.from_bytes(head[:8], "little")
            if size > min(MAX_HEADER, os.fstat(f.fileno()).st_size - 8):
                return None
            f.seek(8)
            header = json.loads(f.read(size))
    except (OSError, zipfile.BadZipFile):
        return None
    except (ValueError, RecursionError):  # header-shaped, not JSON: a damaged safetensors file
        return SAFETENSORS
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    if meta.get("format") == EXPORT_FORMAT:
        return EXPORT
    if BANK_KEY in meta:
        return BANK
    return SAFETENSORS


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)  # also through a hard link
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _reason(err: BaseException) -> str:
    return " ".join(str(getattr(err, "strerror", None) or err).split())[:200]


@dataclass(frozen=True)
class Output:
    """A file to write: ``path`` as given; ``what`` names its content ("the caption bank"); ``flag``
    the option that named it ("--out", "" for a positional argument); ``inputs`` the command's input
    files, each with what it is ("the checkpoint being exported"); ``kind`` the model kind written (it
    may replace a file of the same kind); ``suffix`` the suffix its format needs."""

    path: Path
    what: str
    flag: str = ""
    inputs: Mapping[Path, str] = field(default_factory=dict)
    kind: str | None = None
    suffix: str | None = None

    @property
    def label(self) -> str:
        return f"{self.flag} {self.path}" if self.flag else str(self.path)

    @property
    def target(self) -> Path:
        """The file replaced: ``path`` with its symbolic links resolved (links are written through)."""
        return Path(os.path.realpath(self.path))

    def check(self, folder: bool = True) -> Path:
        """Raise an OutputError if ``path`` must not be written (module docstring); returns the target.
        ``folder=False``: leave whether its folder can be made and written to the write."""
        label, target = self.label, self.target
        via = f" (through the link to {target})" if Path(self.path).is_symlink() else ""
        if target.is_dir():
            raise OutputError(f"{label}: is a folder{via}; expected a file path for {self.what}")
        if os.path.lexists(target) and not target.is_file():
            raise OutputError(
                f"{label}: is not a regular file (a device, pipe or socket){via}; refusing to replace it "
                f"with {self.what}: expected a file path"
            )
        for given, role in self.inputs.items():
            if target.exists() and _same_file(target, Path(given)):
                raise OutputError(f"{label}: is {role}{via}; refusing to replace it: choose another path")
        if self.suffix is not None and Path(self.path).suffix != self.suffix:
            raise OutputError(
                f"{label}: {self.what} is a {self.suffix} file; expected a path ending in {self.suffix}"
            )
        found = model_kind(target) if target.is_file() else None
        if found is not None and found != self.kind:
            if self.kind is not None:
                raise OutputError(
                    f"{label}: is not {self.kind} but {found}{via}; refusing to replace it: choose another path"
                )
            raise OutputError(
                f"{label}: is {found}{via}; refusing to replace it with {self.what}: choose another path"
            )
        problem = folder_problem(target.parent, noun="its folder") if folder else None
        if problem:
            raise OutputError(f"{label}: {problem}")
        return target

    @contextlib.contextmanager
    def replacing(self) -> Iterator[Path]:
        """``with out.replacing() as temp:`` write the file at ``temp``; on leaving the block it replaces
        the target (checked again first: the path may have changed during the work). An exception in
        the block, or a failed write, leaves the target as it was and removes the temp file; an OSError
        becomes one naming the output."""
        target = self.check(folder=False)  # a folder that cannot be made: an OSError below
        temp = temp_beside(target)
        try:
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise OSError(f"cannot create its folder {target.parent}: {_reason(err)}") from err
            yield temp
            commit(temp, target)
        except BaseException as err:
            with contextlib.suppress(OSError):
                temp.unlink()
            if isinstance(err, OSError) and not isinstance(err, OutputError):
                raise OSError(
                    f"{self.label}: cannot write {self.what} there ({_reason(err)}); "
                    + ("it is unchanged" if target.exists() else "nothing was written")
                ) from err
            raise

    def write_bytes(self, data: bytes) -> Path:
        with self.replacing() as temp, open(temp, "xb") as f:
            f.write(data)
        return Path(self.path)

    def write_text(self, text: str) -> Path:
        return self.write_bytes(text.encode("utf-8"))


def output(
    path: str | Path,
    what: str,
    *,
    flag: str = "",
    inputs: Mapping[str | Path, str] | None = None,
    kind: str | None = None,
    suffix: str | None = None,
    check_folder: bool = True,
) -> Output:
    """An :class:`Output`, checked now (before the work that produces it): see the module docstring.
    ``check_folder=False`` leaves a folder that cannot be made or written to the write (an OSError
    then), for a command that reports its results before it writes them."""
    out = Output(Path(path), what, flag, {Path(p): r for p, r in (inputs or {}).items()}, kind, suffix)
    out.check(folder=check_folder)
    return out


def replaceable_in_place(path: str | Path, what: str, flag: str = "") -> Path:
    """The file to rewrite when a command updates ``path`` in place (``tune --write``): its link
    target, which must be a writable regular file in a writable folder; else an OutputError."""
    label = f"{flag} {path}" if flag else str(path)
    target = Path(os.path.realpath(path))
    via = f" (through the link to {target})" if Path(path).is_symlink() else ""
    if not target.is_file():
        raise OutputError(f"{label}: is not a regular file{via}; expected {what} to rewrite")
    if not (os.access(target, os.W_OK) and os.access(target.parent, os.W_OK | os.X_OK)):
        raise OutputError(f"{label}: cannot be replaced{via} (it or its folder is not writable)")
    return target


def temp_beside(target: Path) -> Path:
    """A fresh hidden name in ``target``'s folder that keeps its suffix (``.x.1234-ab12cd34.partial.png``)."""
    target = Path(target)
    return target.with_name(f".{target.stem}.{os.getpid()}-{uuid.uuid4().hex[:8]}.partial{target.suffix}")


def commit(temp: Path, target: Path, mode: int | None = None) -> None:
    """fsync ``temp``, give it ``mode`` (default: the target's if it exists, else the umask's) and
    ``os.replace`` it over ``target``'s link target; then fsync the folder. On failure the temp file is
    removed and the OSError raised (the target unchanged)."""
    target = Path(os.path.realpath(target))
    try:
        if mode is None:
            mode = stat.S_IMODE(target.stat().st_mode) if target.is_file() else 0o666 & ~_umask()
        fd = os.open(temp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(temp, mode)
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            Path(temp).unlink()
        raise
    _fsync_dir(target.parent)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every file system lets a folder be opened
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def folder_problem(folder: Path, noun: str = "the folder", keep: bool = False) -> str | None:
    """Why files cannot be written in ``folder`` (created if missing), or None: "cannot create the folder
    F (reason)", "the folder F is not writable" (``noun`` names it: "its folder" for an output's). Found by
    creating it and, unless ``keep``, removing again what was made, so a check before the work leaves
    nothing behind. ``keep`` for a folder meant to stay that other processes may share (a feature cache):
    removing it could pull it from under a process that has just found it."""
    folder = Path(folder)
    missing = [] if keep else [p for p in [folder, *folder.parents] if not os.path.lexists(p)]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK | os.X_OK):
            return f"{noun} {folder} is not writable"
    except OSError as err:
        return f"cannot create {noun} {folder} ({_reason(err)})"
    finally:
        for made in missing:  # deepest first
            with contextlib.suppress(OSError):
                made.rmdir()
    return None
