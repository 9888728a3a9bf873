"""SIGTERM to a local sweep stops its worker processes too (captioning/training/sweep_stop.py): the sweep
exits 143 with one line on how to go on, and no job keeps training unseen."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import time

import psutil
import pytest

from captioning.training.sweep_stop import stop_workers

from support import endless_train


def _sleep(ready, ignore_sigterm: bool) -> None:
    if ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready.set()
    time.sleep(120)


def test_workers_get_sigterm_and_one_that_ignores_it_is_killed_after_the_grace() -> None:
    ctx = multiprocessing.get_context("spawn")
    ready = [ctx.Event(), ctx.Event()]
    polite = ctx.Process(target=_sleep, args=(ready[0], False))
    stubborn = ctx.Process(target=_sleep, args=(ready[1], True))
    polite.start(), stubborn.start()
    assert all(event.wait(60) for event in ready)  # started, and the stubborn one ignores SIGTERM
    assert stop_workers(grace=3) == 2
    assert not polite.is_alive() and polite.exitcode == -signal.SIGTERM
    assert not stubborn.is_alive() and stubborn.exitcode == -signal.SIGKILL


def _nothing() -> None:
    pass


def test_a_worker_reaped_by_another_thread_is_counted_and_not_killed_again() -> None:
    # loky's manager thread joins the workers it sees die; multiprocessing then still calls the child alive
    # (its waitpid finds no child) and a SIGKILL to the pid raised ProcessLookupError out of the handler,
    # which ended a stopped sweep with status 1 instead of 143.
    ctx = multiprocessing.get_context("spawn")
    gone = ctx.Process(target=_nothing)
    gone.start()
    assert multiprocessing.connection.wait([gone.sentinel], 60)
    assert os.waitpid(gone.pid, 0)[0] == gone.pid  # reaped elsewhere, as loky's thread does
    assert gone.is_alive()  # what multiprocessing believes
    assert stop_workers(grace=1) == 1


@pytest.mark.slow  # a sweep of two endless tiny jobs, stopped once both train (~30-60 s on 2 busy cores)
def test_sigterm_to_a_joblib_sweep_ends_its_workers(tmp_path) -> None:
    log = tmp_path / "out.txt"
    args = [
        "-m",
        "hydra/launcher=local",
        "hydra.launcher.n_jobs=2",
        "seed=0,1",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]
    with endless_train.running(args, log) as sweep:
        endless_train.wait_for(sweep, log, "step 2/", count=2)  # both jobs are training
        workers = psutil.Process(sweep.pid).children(recursive=True)
        assert len([w for w in workers if "loky" in " ".join(w.cmdline())]) >= 2
        sweep.send_signal(signal.SIGTERM)
        assert sweep.wait(timeout=120) == 143, log.read_text()[-3000:]
        _, alive = psutil.wait_procs(workers, timeout=30)
        assert alive == []
    text = log.read_text()
    assert "sweep stopped by SIGTERM (2 running job(s) stopped)" in text and "ckpt_path=auto" in text


@pytest.mark.slow  # a sweep of two endless tiny jobs in one process, stopped once the first trains (~30 s)
@pytest.mark.parametrize("workers", [0, 1], ids=["no loader workers", "a loader worker"])
def test_sigterm_to_a_sweep_that_trains_in_its_own_process_saves_the_running_job(workers, tmp_path) -> None:
    """Hydra's basic launcher runs the jobs in the sweep's process, where Lightning's SIGTERM handler calls
    this module's after its own: that one exited at once (143, "0 running job(s) stopped") and the running
    job's steps were lost. Now the job stops at its next step with its last.ckpt, and the next job never
    starts. A DataLoader worker is a child process too, and must not be taken for a sweep's worker."""
    sweep_dir, log = tmp_path / "sweep", tmp_path / "out.txt"
    args = ["-m", "seed=0,1", f"data.num_workers={workers}", f"hydra.sweep.dir={sweep_dir}"]
    with endless_train.running(args, log) as sweep:
        endless_train.wait_for(sweep, log, "step 3/")  # the first job trains
        sweep.send_signal(signal.SIGTERM)
        assert sweep.wait(timeout=120) == 143, log.read_text()[-3000:]
    text = log.read_text()
    assert "the running job stops at its next step" in text and "ckpt_path=auto" in text
    assert "stopped by SIGTERM at step" in text  # the job's own line: where it stopped
    assert (sweep_dir / "0" / "checkpoints" / "last.ckpt").is_file()
    assert not (sweep_dir / "1").exists()  # the sweep ended with the job
