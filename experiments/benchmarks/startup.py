"""Start-up and picture rows of the benchmark: wall time of ``captioning --help`` and ``captioning caption --help``
in a fresh interpreter (what a user waits for before any work; heavy imports are deferred to ``run``), and
the time to draw one attention overlay."""

from __future__ import annotations

import subprocess
import sys
import time

from experiments.benchmarks.timing import median


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


def bench_overlay(repeats: int = 5, words: int = 9, grid: int = 14) -> list[dict]:
    """One attention overlay (``viz.render_overlay``) of a ``words``-word caption over a grid×grid map."""
    import numpy as np
    from PIL import Image

    from captioning.inference.viz import render_overlay

    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 256, (224, 224, 3), dtype=np.uint8))
    attention = rng.dirichlet(np.ones(grid * grid), size=words)  # (T, H*W)
    tokens = [f"w{i}" for i in range(words)]
    render_overlay(image, tokens, attention, (grid, grid))  # fonts and colour table loaded once
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        render_overlay(image, tokens, attention, (grid, grid), caption=" ".join(tokens), score=-3.0)
        times.append(time.perf_counter() - start)
    return [{"decoder": "-", "what": f"overlay, {words} words over {grid}x{grid}", "seconds": median(times)}]
