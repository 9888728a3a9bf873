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
    printed = [line.rstrip() for line in done.stdout.splitlines() + done.stderr.splitlines()]  # as padded
    assert set(printed) <= set(logged) and len(logged) == len(printed)
    assert any(line.startswith("best checkpoint: ") for line in logged)  # the project's print
    assert "`Trainer.fit` stopped: `max_steps=2` reached." in logged  # Lightning's own logger


def test_a_second_start_in_the_folder_is_marked_in_its_log(tmp_path):
    """A resume (or a start refused there) appends to the run's log: a line says where it begins."""
    first = run_tiny(tmp_path / "run")
    again = run_tiny(tmp_path / "run", "trainer.max_steps=4", "ckpt_path=last")
    assert first.returncode == again.returncode == 0, again.stderr
    logged = (tmp_path / "run" / "train.log").read_text().splitlines()
    marks = [
        i
        for i, line in enumerate(logged)
        if line.endswith(": captioning-train started again in this folder ---")
    ]
    assert len(marks) == 1 and logged[marks[0] - 1].startswith("best checkpoint: ")
    assert logged[-1].startswith("best checkpoint: ") and "`max_steps=4` reached" in "\n".join(
        logged[marks[0] :]
    )


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


def test_a_bar_redrawn_over_several_lines_leaves_its_last_frame(run_file, monkeypatch):
    """rich redraws a bar that wraps by moving the cursor up (ESC[1A) and erasing: its frames must not pile
    up in the file (2-3 lines a step at a terminal's width). Only the first frame can get out before a
    redraw shows the bar's height."""
    console, _ = consoles(monkeypatch)
    up = "\r\x1b[2K\x1b[1A\x1b[2K"  # rich's cursor positioning before a redraw of a two-line bar
    with run_log.console_copied_to_run_log():
        print("starting")
        sys.stdout.write("Epoch 0 1/9\nloss a")
        for step in range(2, 9):
            sys.stdout.write(f"{up}Epoch 0 {step}/9\nloss {step}")
        sys.stdout.write(f"{up}printed under the bar\nEpoch 0 9/9\nloss 9")  # a print while the bar shows
        sys.stdout.write("\n")  # the bar ends
        print("best checkpoint: last.ckpt")
    lines = run_file.read_text().splitlines()
    assert lines[0] == "starting" and lines[-4:] == [
        "printed under the bar",
        "Epoch 0 9/9",
        "loss 9",
        "best checkpoint: last.ckpt",
    ]
    assert len(lines) <= 6 and not any(line.startswith("loss ") and line != "loss 9" for line in lines[2:])
    assert console.getvalue().count("Epoch 0") == 9  # the console gets every frame


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
