"""``captioning models install --from SOURCE``: the zoo's files for an installed wheel, which has no
docs/models/ of its own, copied from a clone (or its docs/models/ folder, or any folder holding them) or
a release archive (.zip, .tar, .tar.gz), each checked against the SHA-256 of captioning/zoo.py.

Each file is hashed as it is copied, into a temporary file beside its destination that is renamed over
it only when the hash is the zoo's: a damaged or different file is never installed, and an interrupted
copy leaves nothing under the model's name. Archive members are read by their file name only (never
extracted by their stored path). Nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import os
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import BinaryIO

from captioning.zoo import CACHE, MODELS, sha256_of


class InstallError(ValueError):
    """A source that is not a folder or an archive, or that holds none of the zoo's files."""


@dataclass(frozen=True)
class Installed:
    name: str
    path: Path  # where the model is now (or would have gone)
    status: str  # "installed", "already installed" or a one-line reason it was not


def _folder_files(root: Path) -> dict[str, Path]:
    """Zoo file name -> path in a folder, its docs/models/ (a clone) first."""
    found: dict[str, Path] = {}
    for folder in (root / "docs" / "models", root):
        for model in MODELS.values():
            if model.file not in found and (folder / model.file).is_file():
                found[model.file] = folder / model.file
    return found


@contextmanager
def _members(source: Path) -> Iterator[dict[str, object]]:
    """Zoo file name -> an opener of its bytes, for a folder or an archive."""
    wanted = {m.file for m in MODELS.values()}
    if source.is_dir():
        yield {name: partial(path.open, "rb") for name, path in _folder_files(source).items()}
    elif zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as archive:
            members = {}
            for info in archive.infolist():
                name = Path(info.filename).name
                if not info.is_dir() and name in wanted and name not in members:
                    members[name] = lambda i=info: archive.open(i)
            yield members
    elif tarfile.is_tarfile(source):
        with tarfile.open(source) as archive:
            members = {}
            for info in archive.getmembers():
                name = Path(info.name).name
                if info.isfile() and name in wanted and name not in members:
                    members[name] = lambda i=info: archive.extractfile(i)
            yield members
    else:
        raise InstallError(
            f"--from {source}: expected a clone, a folder of model files, or a .zip/.tar archive"
        )


def _copy_checked(stream: BinaryIO, target: Path, expected: str) -> str | None:
    """Copy ``stream`` to ``target`` through a temporary file renamed over it only when its SHA-256 is
    ``expected``; returns the actual hash when it differs (nothing is written then)."""
    digest = hashlib.sha256()
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            while chunk := stream.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != expected:
            return digest.hexdigest()
        os.replace(temp, target)
        temp = None
        return None
    finally:
        if temp is not None:
            Path(temp).unlink(missing_ok=True)


def install_models(source: str | Path, dest: str | Path | None = None) -> list[Installed]:
    """Install every zoo model ``source`` holds into ``dest`` (default ~/.cache/captioning/models, a folder
    ``Captioner.from_pretrained`` searches). A model already there with the right hash is left alone."""
    source = Path(source).expanduser()
    if not source.exists():
        raise InstallError(f"--from {source}: no such file or folder")
    dest = Path(dest).expanduser() if dest is not None else CACHE.expanduser()
    out: list[Installed] = []
    with _members(source) as members:
        if not members:
            files = ", ".join(m.file for m in MODELS.values())
            raise InstallError(f"--from {source}: holds none of the zoo's files ({files})")
        try:
            dest.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise InstallError(f"--to {dest}: cannot create the folder ({err.strerror or err})") from err
        for model in MODELS.values():
            opener = members.get(model.file)
            if opener is None:
                continue
            target = dest / model.file
            if target.is_file() and sha256_of(target) == model.sha256:
                out.append(Installed(model.name, target, "already installed"))
                continue
            with opener() as stream:
                actual = _copy_checked(stream, target, model.sha256)
            status = "installed" if actual is None else (
                f"not installed: its SHA-256 is {actual[:16]}..., not the zoo's {model.sha256[:16]}... "
                "(a different or damaged file)"
            )  # fmt: skip
            out.append(Installed(model.name, target, status))
    return out
