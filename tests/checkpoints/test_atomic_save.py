"""Checkpoint files are written atomically (captioning/checkpoints/save.py): a crash mid-write leaves the
previous file whole, and the temp files a killed writer leaves are removed at the next save, never a live
writer's or another file. Resuming from them is tests/training/test_resume.py's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from captioning.checkpoints import save as checkpoint_io
from captioning.checkpoints.save import AtomicCheckpointIO, atomic_torch_save


def test_a_crash_mid_write_leaves_the_previous_checkpoint_intact(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "checkpoints" / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint({"global_step": 10, "w": torch.ones(1000)}, target)
    before = target.read_bytes()

    def crash_after_partial_bytes(obj, f):
        f.write(b"PK\x03\x04" + b"\x00" * 4096)  # the start of a zip, then the "power cut"
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint_io.torch, "save", crash_after_partial_bytes)
    with pytest.raises(OSError, match="No space left on device"):
        AtomicCheckpointIO().save_checkpoint({"global_step": 20, "w": torch.zeros(1000)}, target)
    assert target.read_bytes() == before
    assert torch.load(target, weights_only=True)["global_step"] == 10
    assert sorted(p.name for p in target.parent.iterdir()) == ["last.ckpt"]  # no temp file left behind


def test_a_temp_file_left_by_a_killed_writer_is_removed_at_the_next_save(tmp_path: Path) -> None:
    target = tmp_path / "last.ckpt"
    stale = tmp_path / ".last.ckpt.4242-deadbeef.tmp"
    stale.write_bytes(b"half a checkpoint")
    other = tmp_path / ".best.ckpt.4242-deadbeef.tmp"  # another target's temp: not ours to delete
    other.write_bytes(b"x")
    atomic_torch_save({"global_step": 3}, target)
    assert not stale.exists() and other.exists()
    assert torch.load(target, weights_only=True) == {"global_step": 3}


def test_file_urls_are_saved_atomically_too(tmp_path: Path) -> None:
    AtomicCheckpointIO().save_checkpoint({"global_step": 1}, f"file://{tmp_path}/a/last.ckpt")
    assert torch.load(tmp_path / "a" / "last.ckpt", weights_only=True) == {"global_step": 1}


def test_orphan_temps_of_a_live_writer_or_other_files_are_kept(tmp_path: Path) -> None:
    live = tmp_path / f".best.ckpt.{os.getppid()}-0badf00d.tmp"  # a running process's write
    mine = tmp_path / f".best.ckpt.{os.getpid()}-0badf00d.tmp"  # this process has written nothing yet
    other = tmp_path / ".notes.tmp"
    for path in (live, mine, other):
        path.write_bytes(b"x")
    assert checkpoint_io.remove_orphan_temps(tmp_path) == [mine]
    assert live.exists() and other.exists()
