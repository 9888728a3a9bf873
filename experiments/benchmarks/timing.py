"""Timing and memory primitives of the benchmarks: medians, alternating pairs, peak memory, the roofline."""

from __future__ import annotations

import gc
import threading
import time

import psutil
import torch

from captioning.runtime import release_free_heap


class PeakMemory:
    """Peak memory during a block: CUDA's allocator peak, or sampled process RSS growth on CPU."""

    def __init__(self, device: torch.device):
        self.device, self.peak_mb = device, 0.0

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
            return self
        gc.collect()
        release_free_heap()  # else memory freed by an earlier block keeps the baseline high and hides growth
        self.proc, self.base, self.stop = psutil.Process(), psutil.Process().memory_info().rss, False
        self.high = self.base

        def sample():
            while not self.stop:
                self.high = max(self.high, self.proc.memory_info().rss)
                time.sleep(0.002)

        self.thread = threading.Thread(target=sample, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            self.peak_mb = torch.cuda.max_memory_allocated() / 2**20
        else:
            self.stop = True
            self.thread.join()
            self.peak_mb = (self.high - self.base) / 2**20


def seconds(fn, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def timed(fn, repeats: int, device: torch.device, warmup: int = 1) -> float:
    """Median seconds per call."""
    for _ in range(warmup):
        fn()
    return median([seconds(fn, device) for _ in range(repeats)])


def timed_pairs(fn, reference, repeats: int, device: torch.device) -> tuple[float, float, float]:
    """Median seconds of ``fn`` and of ``reference`` timed alternately (fn, ref, fn, ref, ...), and the
    median of the per-pair ratios ref / fn. A shared machine's speed drifts by ±20% over seconds (other
    processes, clock): alternating puts the drift on both sides of each ratio instead of on one."""
    fn(), reference()  # warm-up
    pairs = [(seconds(fn, device), seconds(reference, device)) for _ in range(repeats)]
    ours, ref = zip(*pairs)
    return median(list(ours)), median(list(ref)), median([r / o for o, r in pairs])


def matmul_peak(device: torch.device, dtype: torch.dtype, n: int = 2048) -> float:
    """FLOP/s of a large square matmul in the dtype the training step's matmuls run in."""
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    sec = timed(lambda: a @ b, repeats=5, device=device)
    return 2 * n**3 / sec
