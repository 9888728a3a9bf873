"""``captioning-train`` as a child process that trains until stopped: the tests of what a signal does to a
run or a sweep start one, wait until it trains, signal it and read what it said."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psutil

from support import TINY

# a tiny run that never ends by itself, one progress line per step (the log is not a tty)
ENDLESS = [
    *TINY,
    "trainer.max_steps=1000000",
    "trainer.max_epochs=100000",
    "callbacks.progress_lines.every_n_steps=1",
]


def captioning_train() -> list[str]:
    script = Path(sys.executable).with_name("captioning-train")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "captioning.training.train"]


@contextmanager
def running(args: list[str], log: Path) -> Iterator[subprocess.Popen]:
    """``captioning-train ENDLESS args`` with stdout and stderr into ``log``, in ``log``'s folder; on leaving,
    it and every process it started that is still there are killed (a failed test leaves none training)."""
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [*captioning_train(), *args, *ENDLESS], stdout=out, stderr=subprocess.STDOUT, cwd=log.parent
        )
    try:
        yield proc
    finally:
        left = psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []
        for child in [proc, *left]:
            with suppress(psutil.NoSuchProcess, ProcessLookupError):
                child.kill()
        proc.wait()


def wait_for(proc: subprocess.Popen, log: Path, text: str, count: int = 1, timeout: float = 240) -> None:
    """Until ``text`` stands ``count`` times in ``log``; the log's tail in the failure if ``proc`` ends first
    or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while log.read_text().count(text) < count:
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)
