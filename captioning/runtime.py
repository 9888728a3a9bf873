"""Process-wide settings that the entry points (training, CLIs, benchmarks, tests) apply at start-up.

``import captioning`` changes nothing in the process; ``configure_process()`` is what an entry point
calls first. It sets, unless the user already did:

* ``OMP_WAIT_POLICY=PASSIVE``: GNU OpenMP threads otherwise spin while waiting for each other. When
  another process holds a core (a shared 2-core machine, a data-loader worker), every small matmul then
  waits a full scheduler slice: we measured a training step at 10 s with 2 threads vs 0.45 s with passive
  waiting. libgomp reads it when it is loaded, so this must run before ``import torch``.
* ``WANDB_MODE=offline``: W&B online mode with no network blocks for ~100 s.
* glibc's malloc tuning below (``keep_freed_memory``).

glibc serves allocations above 32 MB (its largest mmap threshold) with a fresh ``mmap`` and unmaps them
on free, so every step of a training loop or beam search page-faults and zero-fills its large tensors
again (the (B, L, D') grid, the (B, K, L, A) additive-attention tensor, the (B, T, V) logits). Serving
everything from the heap and keeping freed memory there for reuse made the benchmark's soft training
step ~10% faster here (medians of 5 steps, 3 alternating runs each: 1.25 / 1.28 / 1.25 s -> 1.03 / 1.20
/ 1.14 s). PyTorch's CPU tuning guide gets the same effect by preloading jemalloc or tcmalloc. The
price is memory: the process keeps its peak heap until it exits, and a loop of 64 MB alloc/free settles
after a few iterations at ~6x that size (tests/package/test_runtime.py), fine for a training or decoding job.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1  # glibc mallopt parameters (malloc.h)
M_MMAP_MAX = -4
KEEP = 2**31 - 1  # bytes of free heap top that may stay unreturned (the largest int mallopt takes)


def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc on Linux, else None (musl or another libc: nothing to tune)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def keep_freed_memory() -> bool:
    """Make glibc reuse freed memory instead of unmapping it; True if applied.

    A no-op off glibc, or when the user tunes malloc through MALLOC_MMAP_MAX_ / GLIBC_TUNABLES.
    """
    libc = _glibc()
    if libc is None or {"MALLOC_MMAP_MAX_", "GLIBC_TUNABLES"} & set(os.environ):
        return False
    return bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, KEEP))


def release_free_heap() -> None:
    """Return the freed heap pages to the OS now (glibc ``malloc_trim``), e.g. before measuring RSS growth.

    Off glibc nothing happens, and RSS growth measured after earlier allocations is an under-estimate."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def configure_process() -> None:
    """The entry points' process settings (module docstring); an explicit user setting always wins."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("WANDB_MODE", "offline")
    keep_freed_memory()
