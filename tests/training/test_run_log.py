"""``<run>/train.log`` holds what the run printed (it was created by Hydra and left empty)."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys

import pytest

from captioning.training import run_log


def run_tiny(run_dir, *overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "disabled"}
    argv = [sys.executable, "-m", "captioning.training.train", "debug=tiny", "trainer.max_steps=2"]
    return subprocess.run(
        [*argv, *overrides, f"hydra.run.dir={run_dir}"], capture_output=True, text=True, env=env, timeout=600
    )


def test_the_run_folders_log_holds_every_line_the_run_printed(tmp_path):
    done = run_tiny(tmp_path / "run")
    assert done.returncode == 0, done.stderr
    logged = (tmp_path / "run" / "train.log").read_text().splitlines()
    printed = done.stdout.splitlines() + done.stderr.splitlines()
    assert set(printed) <= set(logged) and len(logged) == len(printed)
    assert any(line.startswith("best checkpoint: ") for line in logged)  # the project's print
    assert "`Trainer.fit` stopped: `max_steps=2` reached." in logged  # Lightning's own logger


def test_without_hydras_job_log_no_file_is_written(tmp_path):
    done = run_tiny(tmp_path / "run", "hydra/job_logging=none")
    assert done.returncode == 0, done.stderr
    assert not list((tmp_path / "run").glob("*.log"))


@pytest.fixture
def run_file(tmp_path, monkeypatch):
    """A root logger with one file handler, as Hydra's job logging leaves it."""
    log_file = tmp_path / "train.log"
    handler = logging.FileHandler(log_file)
    monkeypatch.setattr(logging.getLogger(), "handlers", [handler])
    yield log_file
    handler.close()


def consoles(monkeypatch) -> tuple[io.StringIO, io.StringIO]:
    """Standard output and error of our own (set in the test: pytest sets its capture again after setup)."""
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    return out, err


def test_the_file_gets_lines_as_a_terminal_leaves_them(run_file, monkeypatch):
    console, errors = consoles(monkeypatch)
    quiet = logging.getLogger("test_run_log.off_the_root")  # as Lightning's logger: its own console handler
    monkeypatch.setattr(quiet, "propagate", False)
    handler = logging.StreamHandler(errors)
    quiet.addHandler(handler)
    try:
        with run_log.console_copied_to_run_log() as path:
            assert path == run_file
            print("step 1/2")
            print("\r 10%|#", end="")  # a tqdm bar's redraws, then its final state and newline
            print("\r 50%|#####", end="")
            print("\r100%|##########")
            # a line printed under rich's live bar: erase the bar, the line, redraw the bar in colour
            print("\r\x1b[2Kprinted under the bar\n\x1b[1mEpoch 0\x1b[0m 3/9", end="")
            print("\r\x1b[2K\x1b[1mEpoch 0\x1b[0m 9/9")
            print("windows line\r")
            quiet.warning("from a logger that does not propagate")
        print("after the run")  # the console still, the file no more
        assert handler.stream is errors
    finally:
        quiet.removeHandler(handler)
    assert run_file.read_text().splitlines() == [
        "step 1/2", "100%|##########", "printed under the bar", "Epoch 0 9/9", "windows line",
        "from a logger that does not propagate",
    ]  # fmt: skip
    assert (
        console.getvalue().startswith("step 1/2\n\r 10%|#\r 50%|#####")
        and "after the run" in console.getvalue()
    )
    assert errors.getvalue() == "from a logger that does not propagate\n"


def test_a_crash_leaves_its_traceback_in_the_file(run_file, monkeypatch):
    with pytest.raises(ZeroDivisionError), run_log.console_copied_to_run_log():
        print("training")
        1 / 0  # noqa: B018
    text = run_file.read_text()
    assert text.startswith("training\nTraceback (most recent call last):") and "ZeroDivisionError" in text


def test_a_path_that_is_not_utf8_is_written_escaped_not_raised(run_file, monkeypatch):
    consoles(monkeypatch)
    name = os.fsdecode(b"/data/caf\xe9.jpg")  # how Python reads such a name from the file system
    with run_log.console_copied_to_run_log():
        print(f"unreadable: {name}", file=sys.stderr)
    assert run_file.read_text() == "unreadable: /data/caf\\udce9.jpg\n"


def test_one_copy_per_stream_serves_every_run_of_the_process(run_file, monkeypatch):
    """A sweep's jobs in one process: what wrapped sys.stdout in the first (W&B's console capture) still
    sees the later jobs' lines."""
    consoles(monkeypatch)
    with run_log.console_copied_to_run_log():
        first = sys.stdout
    with run_log.console_copied_to_run_log():
        assert sys.stdout is first
        print("job 2")
    assert run_file.read_text() == "job 2\n"


def test_other_processes_of_the_job_do_not_copy(tmp_path, monkeypatch):
    monkeypatch.setattr(logging.getLogger(), "handlers", [logging.FileHandler(tmp_path / "train.log")])
    with run_log.console_copied_to_run_log(enabled=False) as path:
        print("rank 1")
    assert path is None and (tmp_path / "train.log").read_text() == ""
