"""captioning.runtime: glibc keeps freed large tensors for reuse instead of unmapping them."""

import os
import subprocess
import sys

import psutil
import pytest
import torch

from captioning.runtime import keep_freed_memory

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")


def test_large_tensors_are_recycled_in_the_heap_not_unmapped():
    """A training loop's large tensors: after a few iterations they come from kept memory (RSS flat),
    and a free does not give pages back (with glibc's default, each free unmaps 64 MB: see below)."""
    assert keep_freed_memory()  # (conftest applied it already; applying twice is harmless)
    proc = psutil.Process()
    rss = []
    for _ in range(12):  # a steady loop allocating and freeing a 64 MB tensor (> 32 MB mmap threshold)
        x = torch.ones(64 * 2**20 // 4)
        held = proc.memory_info().rss
        del x
        rss.append(proc.memory_info().rss)
        assert held - rss[-1] < 16 * 2**20  # the free kept the pages
    assert max(rss[-4:]) - min(rss[-4:]) < 16 * 2**20  # steady state: no growth, no page faults


def test_a_user_malloc_setting_wins(monkeypatch):
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=1048576")
    assert keep_freed_memory() is False


def test_without_it_glibc_unmaps_every_free():
    """The control: a fresh process with glibc's default gives the 64 MB back at every free."""
    code = (
        "import psutil, torch; p = psutil.Process(); x = torch.ones(64 * 2**20 // 4); "
        "a = p.memory_info().rss; del x; print(a - p.memory_info().rss)"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("MALLOC_MMAP_MAX_", "GLIBC_TUNABLES")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert int(out.stdout) > 60 * 2**20
