"""Progress of long loops (decoding a split, reranking, building a caption bank, scoring, tuning,
captioning a folder), on stderr.

On a terminal: a tqdm bar with the rate and ETA. Elsewhere (a log file, a pipe, CI): one plain line every
``CAPTIONING_PROGRESS_INTERVAL`` seconds (default 5) with the count, elapsed time and ETA, and a last line
when the work ends if any line was printed; work shorter than the interval prints nothing. ``--quiet``
(``set_quiet``) or ``CAPTIONING_QUIET=1`` silences both.

    for start in progress.batches(len(source), batch_size, "decoding"):
        ...
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import IO, Any, TypeVar

QUIET_ENV = "CAPTIONING_QUIET"
INTERVAL_ENV = "CAPTIONING_PROGRESS_INTERVAL"
DEFAULT_INTERVAL = 5.0

T = TypeVar("T")
_quiet = False


def set_quiet(quiet: bool = True) -> None:
    """Silence (or restore) every progress report of this process: the CLIs' ``--quiet``."""
    global _quiet
    _quiet = quiet


def is_quiet() -> bool:
    return _quiet or os.environ.get(QUIET_ENV, "").strip() not in ("", "0")


def interval() -> float:
    try:
        return max(0.0, float(os.environ.get(INTERVAL_ENV, DEFAULT_INTERVAL)))
    except ValueError:
        return DEFAULT_INTERVAL


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60:02d}:{rest % 60:02d}"


class _Silent:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LineProgress(_Silent):
    """A progress report for a stream that is not a terminal: a line per ``every`` seconds."""

    def __init__(self, total: int | None, desc: str, unit: str, stream: IO[str], every: float):
        self.total, self.desc, self.unit, self.stream, self.every = total, desc, unit, stream, every
        self.n, self.lines = 0, 0
        self.start = self.last = time.monotonic()

    def line(self, now: float) -> str:
        elapsed = now - self.start
        if not self.total:
            return f"{self.desc}: {self.n} {self.unit}, {_duration(elapsed)} elapsed"
        done = f"{self.desc}: {self.n}/{self.total} {self.unit} ({100 * self.n / self.total:.0f}%)"
        if self.n >= self.total:
            return f"{done}, done in {_duration(elapsed)}"
        eta = elapsed / self.n * (self.total - self.n) if self.n else None
        return f"{done}, {_duration(elapsed)} elapsed, ETA {_duration(eta) if eta is not None else '?'}"

    def _print(self, now: float) -> None:
        print(self.line(now), file=self.stream, flush=True)
        self.lines += 1
        self.last = now

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last >= self.every and not (self.total and self.n >= self.total):
            self._print(now)

    def close(self) -> None:
        if self.lines:  # short work printed nothing, and ends without a line too
            self._print(time.monotonic())
            self.lines = 0


def bar(total: int | None, desc: str, unit: str = "img", stream: IO[str] | None = None) -> Any:
    """A progress report of ``total`` units: ``.update(n)`` as they are done, ``.close()`` (or ``with``)."""
    stream = stream if stream is not None else sys.stderr
    if is_quiet() or total == 0:
        return _Silent()
    if getattr(stream, "isatty", lambda: False)():
        from tqdm import tqdm  # the text bar: tqdm.auto warns at import in a kernel without ipywidgets

        return tqdm(
            total=total, desc=desc, unit=unit, file=stream, leave=False, dynamic_ncols=True, delay=1.0
        )
    return LineProgress(total, desc, unit, stream, interval())


def batches(total: int, batch_size: int, desc: str, unit: str = "img") -> Iterator[int]:
    """``range(0, total, batch_size)``, each batch counted as done when the loop asks for the next."""
    with bar(total, desc, unit) as report:
        for start in range(0, total, batch_size):
            yield start
            report.update(min(batch_size, total - start))


def track(items: Iterable[T], desc: str, total: int | None = None, unit: str = "img") -> Iterator[T]:
    """``items``, each counted as done when the loop asks for the next."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with bar(total, desc, unit) as report:
        for item in items:
            yield item
            report.update(1)
