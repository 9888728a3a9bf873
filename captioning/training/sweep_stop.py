"""SIGTERM to a local sweep (``captioning-train -m hydra/launcher=local``) stops its running jobs too.

The joblib launcher runs each job in a worker process (loky). Killed by SIGTERM, the sweep's own process
used to die at once and leave its workers training on, unseen, until their jobs ended. With this handler
(installed by ``captioning-train`` for ``-m`` / ``--multirun`` only, in the sweep's process alone: the
workers never run ``cli()``) SIGTERM is passed on to every worker, as for a single run: Lightning stops
each job at its next step and ``captioning-train`` reports where (exit 143). Workers still running after
``GRACE_SECONDS`` are killed; a worker whose job has stopped ends itself (``in_worker_process``). Then the sweep exits with status 143 (as a process killed by SIGTERM) and
one line on how to go on: the same command plus ``ckpt_path=auto`` (finished jobs are kept, the others
resume from their last.ckpt: docs/guides/sweeps.md).

A job that is not in a worker process (Hydra's basic launcher runs the jobs one after another in this
process; joblib with ``n_jobs=1``) gets SIGTERM through Lightning's own handler while it trains. Lightning
calls this handler after its own; here it then only says how to go on and returns, so that the job stops
at its next step with its ``last.ckpt`` and ``captioning-train`` exits 143 (between two such jobs, nothing
trains: the sweep exits at once).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import time

GRACE_SECONDS = 60.0  # a job stops at its next step; a slow step (a validation) may take this long


def stop_workers(grace: float = GRACE_SECONDS) -> int:
    """SIGTERM every child process of this one, wait up to ``grace`` seconds for them, kill the rest;
    returns how many there were."""
    children = multiprocessing.active_children()
    for child in children:
        child.terminate()  # SIGTERM
    deadline = time.monotonic() + grace
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
    for child in children:
        if child.is_alive() and child.pid is not None:
            # is_alive() stays True for a child that another thread reaped first (loky's manager thread
            # joins the workers it sees die): its pid is gone, and the kill must not end the handler.
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)  # loky's processes have no kill()
                child.join(5)
    return len(children)


def in_worker_process() -> bool:
    """True in a process that multiprocessing started (a local sweep's joblib worker): a job stopped by
    SIGTERM there ends the process, which the sweep's process waits for (a loky worker would otherwise
    stay, idle, after its job)."""
    return multiprocessing.parent_process() is not None


def _on_sigterm(signum: int, frame: object) -> None:
    if signal.getsignal(signal.SIGTERM) is not _on_sigterm:
        # A job trains in this process (Hydra's basic launcher; joblib with one job): Lightning's handler is
        # installed and calls this one after its own, having marked the stop; the job saves last.ckpt at
        # its next step and captioning-train exits 143. Exiting here lost everything since the last save.
        # (Its DataLoader workers are children too: counting children cannot tell a sweep's workers.)
        print(
            "captioning-train: sweep stopped by SIGTERM: the running job stops at its next step with its "
            "last.ckpt; go on with the same command plus ckpt_path=auto (finished jobs are kept, the others "
            "resume from their last.ckpt)",
            file=sys.stderr,
            flush=True,
        )
        return
    try:
        stopped = f"{stop_workers()} running job(s) stopped"
    except Exception as error:  # an exception out of a signal handler would end the sweep with status 1
        stopped = f"stopping its workers failed: {type(error).__name__}: {error}"
    print(
        f"captioning-train: sweep stopped by SIGTERM ({stopped}); go on with the same command plus "
        "ckpt_path=auto (finished jobs are kept, the others resume from their last.ckpt)",
        file=sys.stderr,
        flush=True,
    )
    sys.stdout.flush()
    os._exit(143)  # not SystemExit: the launcher's clean-up would wait on the workers just stopped


def install() -> None:
    """Pass SIGTERM on to the sweep's workers (module docstring). For ``captioning-train -m`` only."""
    signal.signal(signal.SIGTERM, _on_sigterm)
