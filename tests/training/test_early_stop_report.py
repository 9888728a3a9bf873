"""EarlyStopReport (captioning/training/callbacks/early_stop_report.py): the line that says why early stopping
ended a run names the best value and epoch as the kept checkpoint has them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from pytorch_lightning.callbacks import EarlyStopping

from captioning.training.callbacks.early_stop_report import EarlyStopReport


def test_the_best_named_is_the_kept_checkpoints_not_the_stoppers_own():
    """A gain smaller than ``min_delta`` does not move the stopper's best (nor reset its patience), but the
    checkpoint callback keeps that validation: the line named the earlier epoch while the run's
    ``best checkpoint:`` was the later one."""
    es = EarlyStopping(monitor="val/CIDEr", mode="max", patience=1, min_delta=0.002)
    report = EarlyStopReport()
    for epoch, value in enumerate([0.4000, 0.4010]):
        report.history.setdefault("val/CIDEr", []).append((epoch, value))
        stop, _ = es._evaluate_stopping_criteria(torch.tensor(value))
    assert stop and float(es.best_score) == pytest.approx(0.4)  # the stopper holds epoch 0's value
    es.stopped_epoch = 1
    line = report.describe(es, SimpleNamespace(max_epochs=5))
    assert "did not improve by more than min_delta=0.002 for 1 validation (patience=1)" in line
    assert "; best val/CIDEr 0.4010 in epoch 1; the best checkpoint is kept." in line


def test_a_minimised_metric_names_its_lowest_value():
    es = EarlyStopping(monitor="val/loss", mode="min", patience=2)
    report = EarlyStopReport()
    for epoch, value in enumerate([3.0, 2.5, float("nan"), 2.7, 2.6]):
        report.history.setdefault("val/loss", []).append((epoch, value))
    es.stopping_reason = type(es.stopping_reason).PATIENCE_EXHAUSTED
    es.stopped_epoch, es.wait_count = 4, 2
    line = report.describe(es, SimpleNamespace(max_epochs=9))
    assert "; best val/loss 2.5000 in epoch 1;" in line
