"""Named command steps run one after another into a log, under advisory file locks: the process half of
``soft_vs_hard_sweep.py`` (which plans the steps), so that several drivers on one machine, or one started
again after a stop, share the sweep's folders without two writers at a time.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import subprocess
from contextlib import contextmanager, nullcontext
from pathlib import Path


@contextmanager
def file_lock(path: Path, wait: bool = True):
    """An advisory lock on ``path`` across processes; yields False when ``wait`` is off and it is taken."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_steps(steps: list[tuple[str, list[str]]], log: Path, shared_lock: Path | None = None) -> str | None:
    """Run the steps in order, appending their output to ``log``; the name of the step that failed, or None.
    Steps named ``record ...`` or ``report ...`` hold ``shared_lock``: one writer of the records at a time."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    for name, argv in steps:
        shared = shared_lock is not None and name.startswith(("record", "report"))
        with file_lock(shared_lock) if shared else nullcontext(), open(log, "a") as out:
            out.write(f"\n### {name}: {shlex.join(argv)}\n")
            out.flush()
            code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
        if code != 0:
            return f"{name} (exit {code})"
    return None
