"""Start-up rows of the benchmark: wall time of ``captioning --help`` and ``captioning caption --help``
in a fresh interpreter (what a user waits for before any work; heavy imports are deferred to ``run``)."""

from __future__ import annotations

import subprocess
import sys
import time

from captioning.benchmarks.timing import median


def bench_startup(repeats: int = 5) -> list[dict]:
    rows = []
    for argv in (["--help"], ["caption", "--help"]):
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "captioning.cli.main", *argv], check=True, capture_output=True
            )
            times.append(time.perf_counter() - start)
        rows.append({"decoder": "-", "what": f"cli: captioning {' '.join(argv)}", "seconds": median(times)})
    return rows
