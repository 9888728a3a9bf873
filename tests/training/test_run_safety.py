"""A training run's checkpoints: never overwritten, always resumable, named when they are wrong."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from support.hostile import (
    assert_one_line,
    mutated,
    poison_weights,
    run_train,
)


def test_a_run_that_never_validated_names_its_last_checkpoint(tmp_path) -> None:
    from captioning.training.train import train

    from support import TINY, compose_train

    best = train(compose_train([*TINY, "trainer.max_steps=2"], tmp_path))
    assert best == str(tmp_path / "checkpoints" / "last.ckpt") and Path(best).is_file()


def test_a_fresh_run_in_a_folder_with_checkpoints_is_refused_and_overwrites_nothing(
    tmp_path, monkeypatch, capsys
) -> None:
    earlier = tmp_path / "run" / "checkpoints" / "last.ckpt"
    earlier.parent.mkdir(parents=True)
    earlier.write_bytes(b"an earlier run's weights")
    assert run_train([], tmp_path / "run", monkeypatch) == 2
    assert_one_line(
        capsys.readouterr().err, str(earlier.parent), "last.ckpt", "ckpt_path=last", "ckpt_path=auto"
    )
    assert earlier.read_bytes() == b"an earlier run's weights"


def test_resuming_from_a_checkpoint_with_non_finite_weights_names_it(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    from captioning.training.train import train

    from support import TINY, compose_train

    run = tmp_path / "run"
    train(compose_train([*TINY, "trainer.max_steps=2"], run))
    last = run / "checkpoints" / "last.ckpt"
    mutated(last, last, poison_weights)
    capsys.readouterr()
    assert run_train(["trainer.max_steps=4", "ckpt_path=last"], run, monkeypatch) == 2
    assert_one_line(capsys.readouterr().err, str(last), "non-finite weights")


def test_a_full_disk_while_saving_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    import captioning.checkpoints.save as save

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(save.torch, "save", full)
    assert run_train(["trainer.max_steps=2"], tmp_path / "run", monkeypatch) == 2
    assert_one_line(capsys.readouterr().err, "could not write the checkpoint", "No space left on device")


def test_an_unreadable_init_from_is_refused_before_the_data_are_read(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    from captioning.data.sources import SyntheticSource

    bad = tmp_path / "prose.ckpt"
    bad.write_text("This is not a checkpoint\n")

    def refuse(*args, **kwargs):
        raise AssertionError("the data were read before init_from was checked")

    monkeypatch.setattr(SyntheticSource, "__init__", refuse)
    assert run_train([f"init_from={bad}"], tmp_path / "run", monkeypatch) == 2
    assert_one_line(capsys.readouterr().err, str(bad), "not a readable checkpoint")


def test_sigterm_stops_training_with_status_143_and_a_checkpoint_to_resume(tmp_path: Path) -> None:
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "captioning.training.train", "debug=tiny", "trainer.max_steps=100000",
           "trainer.enable_progress_bar=false", "callbacks.progress_lines.every_n_steps=1",
           f"hydra.run.dir={run}"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:  # the progress lines: training has started
        if line.startswith("step "):
            break
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "stopped by SIGTERM at step" in err and "resume with ckpt_path=last" in err
    assert (run / "checkpoints" / "last.ckpt").is_file()


def test_last_ckpt_holds_the_end_of_training_and_resuming_extends_it(tmp_path, monkeypatch, capsys) -> None:
    from captioning.training.train import main as train_main

    run = tmp_path / "run"
    last = run / "checkpoints" / "last.ckpt"
    for argv in (["trainer.max_steps=20"], ["trainer.max_steps=26", "ckpt_path=last"]):
        monkeypatch.setattr(sys, "argv", ["captioning-train", "debug=tiny", *argv, f"hydra.run.dir={run}"])
        train_main()  # a finished run: no SystemExit
    assert torch.load(last, weights_only=True)["global_step"] == 26  # the end, not the last periodic save
    capsys.readouterr()
    assert run_train(["trainer.max_steps=10", "ckpt_path=last"], run, monkeypatch) == 2
    assert_one_line(capsys.readouterr().err, str(last), "at step 26", "trainer.max_steps=10 leaves nothing")


def test_resume_and_start_settings_of_round_seven(tmp_path, monkeypatch, capsys) -> None:
    from captioning.training.resume import ResumeError, check_resume_matches

    from support.corpus import build_module, checkpoint_dict

    run = tmp_path / "run"
    assert run_train(["init_from=", "trainer.max_steps=3"], run, monkeypatch) == 2
    assert_one_line(capsys.readouterr().err, "init_from='': expected a checkpoint path, or null")
    assert run_train(["model.decoder.embed_dim=[1,2]", "trainer.max_steps=3"], run, monkeypatch) == 2
    assert_one_line(capsys.readouterr().err, "model.decoder.embed_dim=[1, 2]: expected an integer")
    checkpoint = checkpoint_dict(build_module(["a"]))
    checkpoint["global_step"] = -5
    bad = tmp_path / "bad.ckpt"
    torch.save(checkpoint, bad)
    with pytest.raises(ResumeError, match=re.escape("its global_step is -5; expected the integer step >= 0")):
        check_resume_matches(bad, {"itos": []}, "")
