"""A run that will end before its first validation says so in one line when training starts
(captioning/training/callbacks/no_validation_warning.py), and Lightning indeed does not validate it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from captioning.training.callbacks.no_validation_warning import first_validation_step, reason
from captioning.training.train import train

from support import TINY, compose_train


def _trainer(**kw):
    base = dict(val_check_batch=15, num_training_batches=15, check_val_every_n_epoch=1, max_steps=-1,
                max_epochs=8, accumulate_grad_batches=1, limit_val_batches=None, val_check_interval=1.0)  # fmt: skip
    return SimpleNamespace(**{**base, **kw})


@pytest.mark.parametrize(
    ("settings", "first", "never"),
    [
        ({}, 15, False),  # once per epoch of 15 batches
        ({"max_steps": 14}, 15, True),  # max_steps shorter than one epoch
        ({"max_steps": 15}, 15, False),  # validates at its last step
        ({"check_val_every_n_epoch": 3, "max_steps": 40}, 45, True),  # third epoch's end: batch 45
        ({"check_val_every_n_epoch": 3, "max_epochs": 2}, 45, True),
        ({"val_check_batch": 5, "val_check_interval": 5, "check_val_every_n_epoch": None, "max_steps": 5}, 5, False),
        ({"val_check_batch": 20, "val_check_interval": 20, "check_val_every_n_epoch": None, "max_steps": 19}, 20, True),
        ({"accumulate_grad_batches": 3, "max_steps": 4}, 5, True),  # 15 batches = 5 optimizer steps
        ({"limit_val_batches": 0}, 15, True),
        ({"val_check_batch": float("inf"), "max_steps": 1}, None, False),  # unknown length: not foreseen
    ],
)  # fmt: skip
def test_the_first_validation_step_and_the_verdict(settings, first, never) -> None:
    trainer = _trainer(**settings)
    assert first_validation_step(trainer) == first
    assert (reason(trainer) is not None) == never


def test_a_run_that_will_not_validate_warns_at_the_start_in_one_line(tmp_path, capsys) -> None:
    # 24 images x 5 captions / batch 8 = 15 batches an epoch, validation once an epoch
    train(compose_train([*TINY, "trainer.max_steps=3", "callbacks.progress_lines.every_n_steps=1"], tmp_path))
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if "will never validate" in line]
    assert warnings == [
        "warning: this run will never validate: trainer.max_steps=3 ends before the first validation, at "
        "step 15 (epoch 1 of 15 batches, val_check_interval=1.0, check_val_every_n_epoch=1); no checkpoint "
        "will be ranked and val/* never logged (validate in steps: trainer.val_check_interval=N "
        "trainer.check_val_every_n_epoch=null, with N <= max_steps)"
    ]
    # and Lightning indeed validated nothing
    assert "no validation ran" in captured.err and "val/CIDEr" not in captured.out


def test_a_run_that_validates_prints_no_warning(tmp_path, capsys) -> None:
    overrides = [
        *TINY,
        "trainer.max_steps=4",
        "trainer.val_check_interval=4",
        "trainer.check_val_every_n_epoch=null",
    ]
    train(compose_train(overrides, tmp_path))
    captured = capsys.readouterr()
    assert "will never validate" not in captured.err and "no validation ran" not in captured.err
