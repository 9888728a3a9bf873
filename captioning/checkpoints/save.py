"""AtomicCheckpointIO: Lightning checkpoint writes that a crash cannot leave half-written.

Each checkpoint is written to a temporary file next to its target, flushed and fsync'ed, then moved over
the target with ``os.replace`` (atomic on POSIX within one file system) and the directory entry fsync'ed.
A crash or SIGKILL at any moment leaves either the previous checkpoint or the new one, never a mix.

Why not Lightning's default ``TorchCheckpointIO`` (checked for Lightning 2.6 / fsspec 2026.9): it
serialises the whole checkpoint into memory (a second copy in RAM), then writes through an fsspec
transaction whose local implementation puts the temp file in the *system* temp dir (``tempfile.mkstemp()``)
and ``shutil.move``s it over the target. That is atomic only when /tmp shares the checkpoint's file system;
when it does not (tmpfs, a node-local disk) the move is a copy then a delete, which a crash can interrupt
with the target half-copied. Nothing is fsync'ed either, so after a power loss the renamed file can be
empty. Remote paths (``s3://`` ...) keep Lightning's path: an object upload is all-or-nothing.

Wired in by the trainer config (``captioning/conf/trainer/cpu.yaml``)::

    plugins:
      - _target_: captioning.checkpoints.save.AtomicCheckpointIO
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import uuid
from pathlib import Path
from typing import Any

import torch
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem
from pytorch_lightning.plugins.io import TorchCheckpointIO

from captioning.errors import UserError

_log = logging.getLogger(__name__)

TEMP_SUFFIX = ".tmp"


def _temp_name(target: Path) -> Path:
    # Hidden, unique per process and call, and recognisable as belonging to ``target`` for cleanup.
    return target.with_name(f".{target.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}{TEMP_SUFFIX}")


def _fsync_dir(directory: Path) -> None:
    """Persist the rename itself (the directory entry); a no-op where directories cannot be opened."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def remove_stale_temps(target: Path) -> list[Path]:
    """Delete temp files a killed writer of ``target`` left behind; returns what was removed."""
    removed = []
    for stale in target.parent.glob(f".{target.name}.*{TEMP_SUFFIX}"):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
            removed.append(stale)
    return removed


def _writer_is_gone(temp: Path) -> bool:
    """True unless the process whose id the temp file's name carries still runs (and is not this one,
    which has written nothing yet when it cleans up): a live writer's file is left alone."""
    match = re.search(r"\.(\d+)-[0-9a-f]+" + re.escape(TEMP_SUFFIX) + "$", temp.name)
    if match is None:
        return False  # not one of ours
    pid = int(match.group(1))
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        return False
    return False


def remove_orphan_temps(folder: str | Path) -> list[Path]:
    """Delete the temp files of checkpoint writes in ``folder`` whose writer was killed (a SIGKILL or a
    power loss mid-write leaves ``.NAME.ckpt.PID-XXXX.tmp``); returns what was removed. Run at start-up:
    a temp file of a best checkpoint is never cleaned by a later save, whose name differs."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    removed = []
    for temp in sorted(folder.glob(f".*.ckpt.*{TEMP_SUFFIX}")):
        if temp.is_file() and _writer_is_gone(temp):
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()
                removed.append(temp)
    return removed


class CheckpointWriteError(OSError, UserError):
    """A checkpoint that could not be written (a full disk, a read-only folder), naming the file."""


class NonFiniteWeightsError(RuntimeError, UserError):
    """Weights with NaN/inf: never written as a checkpoint, so no file on disk is ever called good wrongly."""


def non_finite_tensors(state: dict[str, Any]) -> list[str]:
    """Names of the floating tensors of ``state`` that hold a NaN or an infinity."""
    return [
        name
        for name, t in state.items()
        if isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all())
    ]


def atomic_torch_save(obj: Any, target: str | Path) -> None:
    """``torch.save`` via a temp file, fsync and ``os.replace``: the old ``target`` survives any failure.

    A write that fails (a full disk, a read-only folder) raises an OSError naming ``target``."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in remove_stale_temps(target):
        _log.info("removed %s, left by an interrupted checkpoint write", stale)
    temp = _temp_name(target)
    try:
        with open(temp, "xb") as f:  # "x": never clobber; the umask sets permissions as for any file
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, target)
    except BaseException as err:  # including KeyboardInterrupt: never leave the temp file behind
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        if isinstance(err, OSError | RuntimeError) and not isinstance(err, NonFiniteWeightsError):
            # torch reports a full disk as "unexpected pos ..." without a path: say which file failed
            reason = " ".join(str(err).split())[:200]
            raise CheckpointWriteError(
                f"{target}: could not write the checkpoint ({reason}); the previous one is intact"
            ) from err
        raise
    _fsync_dir(target.parent)


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` whose local saves are atomic and durable (see the module docstring)."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options, got {storage_options!r}")
        bad = non_finite_tensors(checkpoint.get("state_dict", {}))
        if bad:  # the step that broke the weights can still have had a finite loss
            raise NonFiniteWeightsError(
                f"{path}: not written: non-finite weights (NaN/inf) in {', '.join(bad[:3])}"
                + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
                + "; the checkpoints already on disk are the last good ones (resume with ckpt_path=last)"
            )
        fs, local_path = url_to_fs(str(path))  # "file:///x" and "/x" -> "/x"
        if not isinstance(fs, LocalFileSystem):
            super().save_checkpoint(checkpoint, path)
            return
        atomic_torch_save(checkpoint, local_path)
