"""Ctrl-C during training (captioning/training/ctrl_c.py): the first stops the run at the end of its step with
last.ckpt, as SIGTERM does, and exits 130 saying where; Lightning alone saved nothing and exited 1."""

from __future__ import annotations

import signal

import pytest
import torch

from support import endless_train


@pytest.mark.slow  # one endless tiny run, interrupted once it trains (~15 s)
def test_the_first_ctrl_c_stops_at_the_steps_end_with_last_ckpt(tmp_path) -> None:
    run, log = tmp_path / "run", tmp_path / "out.txt"
    with endless_train.running(
        ["callbacks.last_checkpoint.every_n_minutes=600", f"hydra.run.dir={run}"], log
    ) as proc:
        endless_train.wait_for(proc, log, "step 20/")  # past epoch 0 (15 steps): no save since its validation
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130, log.read_text()[-3000:]
    text = log.read_text()
    assert "Ctrl-C: the run stops at the end of this step with a last.ckpt to resume from" in text
    stopped = int(text.split("stopped by Ctrl-C at step ")[1].split(";")[0])
    assert stopped >= 20 and "resume with ckpt_path=last" in text
    saved = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert saved["global_step"] == stopped  # where it stopped, not the last periodic save


def test_ctrl_c_goes_through_the_sigterm_notifier_that_ddp_processes_agree_on():
    """With several processes PeriodicCheckpoint replaces the notifier with a note that all processes reduce
    at a batch's end; setting the stop flag directly (each process at its own moment) skipped that."""
    import os
    from types import SimpleNamespace

    from captioning.training.ctrl_c import ctrl_c_stops

    noted = []
    connector = SimpleNamespace(_sigterm_notifier_fn=lambda signum, frame: noted.append(signum))
    with ctrl_c_stops(SimpleNamespace(_signal_connector=connector)) as pressed:
        os.kill(os.getpid(), signal.SIGINT)
    assert pressed == [True] and noted == [signal.SIGTERM]
