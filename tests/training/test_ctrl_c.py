"""Ctrl-C during training (captioning/training/ctrl_c.py): the first stops the run at the end of its step with
last.ckpt, as SIGTERM does, and exits 130 saying where; Lightning alone saved nothing and exited 1."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from support import TINY


def _captioning_train() -> list[str]:
    script = Path(sys.executable).with_name("captioning-train")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "captioning.training.train"]


@pytest.mark.slow  # one endless tiny run, interrupted once it trains (~15 s)
def test_the_first_ctrl_c_stops_at_the_steps_end_with_last_ckpt(tmp_path) -> None:
    run = tmp_path / "run"
    cmd = [
        *_captioning_train(), *TINY, "trainer.max_steps=1000000", "trainer.max_epochs=100000",
        "callbacks.progress_lines.every_n_steps=1", "callbacks.last_checkpoint.every_n_minutes=600",
        f"hydra.run.dir={run}",
    ]  # fmt: skip
    log = tmp_path / "out.txt"
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 180
        while "step 20/" not in log.read_text():  # past epoch 0 (15 steps): no save since its validation
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert "Ctrl-C: the run stops at the end of this step and saves last.ckpt" in text
    stopped = int(text.split("stopped by Ctrl-C at step ")[1].split(";")[0])
    assert stopped >= 20 and "resume with ckpt_path=last" in text
    saved = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert saved["global_step"] == stopped  # where it stopped, not the last periodic save
