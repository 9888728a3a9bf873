"""``<run>/train.log`` holds what the run printed (it was created by Hydra and left empty)."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys

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


def test_the_copy_leaves_redraws_on_the_console_and_restores_every_stream(tmp_path, monkeypatch):
    log_file = tmp_path / "train.log"
    root = logging.getLogger()
    file_handler = logging.FileHandler(log_file)
    monkeypatch.setattr(root, "handlers", [file_handler])
    console, errors = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", console)
    monkeypatch.setattr(sys, "stderr", errors)
    quiet = logging.getLogger("test_run_log.off_the_root")  # as Lightning's logger: its own console handler
    monkeypatch.setattr(quiet, "propagate", False)
    handler = logging.StreamHandler(errors)
    quiet.addHandler(handler)
    try:
        with run_log.console_copied_to_run_log() as path:
            assert path == log_file
            print("step 1/2")
            print("\r 50%|#####", end="")  # a progress bar's redraw
            quiet.warning("from a logger that does not propagate")
        assert sys.stdout is console and sys.stderr is errors and handler.stream is errors
    finally:
        quiet.removeHandler(handler)
        file_handler.close()
    assert log_file.read_text() == "step 1/2\nfrom a logger that does not propagate\n"
    assert console.getvalue() == "step 1/2\n\r 50%|#####"
    assert errors.getvalue() == "from a logger that does not propagate\n"


def test_other_processes_of_the_job_do_not_copy(tmp_path, monkeypatch):
    monkeypatch.setattr(logging.getLogger(), "handlers", [logging.FileHandler(tmp_path / "train.log")])
    with run_log.console_copied_to_run_log(enabled=False) as path:
        print("rank 1")
    assert path is None and (tmp_path / "train.log").read_text() == ""
