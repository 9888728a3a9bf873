"""``captioning-train`` as a child process that trains until stopped: the tests of what a signal does to a
run or a sweep start one, wait until it trains, signal it and read what it said."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

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


def start(args: list[str], log: Path) -> subprocess.Popen:
    """``captioning-train ENDLESS args`` with stdout and stderr into ``log``, in ``log``'s folder."""
    with open(log, "w") as out:
        return subprocess.Popen(
            [*captioning_train(), *args, *ENDLESS], stdout=out, stderr=subprocess.STDOUT, cwd=log.parent
        )


def wait_for(proc: subprocess.Popen, log: Path, text: str, count: int = 1, timeout: float = 240) -> None:
    """Until ``text`` stands ``count`` times in ``log``; the log's tail in the failure if ``proc`` ends first
    or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while log.read_text().count(text) < count:
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)
