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


def _fit(folder, stopper, epochs: int, values: list[float], ckpt_path=None) -> EarlyStopReport:
    """A ScoredModule run with ``stopper``, the report and a checkpoint callback ranking ``v`` (last.ckpt
    in ``folder``); its report."""
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import ModelCheckpoint

    from support.scored_module import ScoredModule

    report = EarlyStopReport()
    keep = ModelCheckpoint(dirpath=folder, monitor="v", mode="max", save_last=True)
    trainer = pl.Trainer(
        max_epochs=epochs, callbacks=[stopper, report, keep], logger=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=folder,
    )  # fmt: skip
    trainer.fit(ScoredModule(values), ckpt_path=ckpt_path)
    return report


def _stopper(cls=None, patience: int = 2):
    from captioning.training.callbacks.early_stopping import EarlyStopping as Ours

    return (cls or Ours)(monitor="v", mode="max", patience=patience, check_on_train_epoch_end=False)


def test_after_a_resume_the_best_named_is_still_the_kept_checkpoints(tmp_path):
    """The history travels in the checkpoint: a run resumed after its best epoch named the best of the
    validations since the resume (0.50) while the kept checkpoint was epoch 0's (0.90)."""
    _fit(tmp_path, _stopper(), 2, [0.9, 0.5])  # epoch 0 is the best; interrupted after epoch 1
    report = _fit(
        tmp_path, _stopper(), 5, [0.5, 0.5, 0.5], ckpt_path=tmp_path / "last.ckpt"
    )  # patience runs out
    assert report.line is not None and "early stopping ended the run in epoch" in report.line
    assert "; best v 0.9000 in epoch 0;" in report.line


@pytest.mark.parametrize("stopper_class", ["ours", "lightning"])
def test_a_resumed_run_that_ends_at_max_epochs_reports_no_stop(stopper_class, tmp_path):
    """The stopper restores the stop of the run it was saved from: the report printed that stop again at the
    end of a resumed run that early stopping did not end."""
    from pytorch_lightning.callbacks import EarlyStopping as LightningEarlyStopping

    cls = None if stopper_class == "ours" else LightningEarlyStopping
    first = _fit(tmp_path, _stopper(cls, patience=1), 5, [0.9, 0.5])
    assert "early stopping ended the run in epoch 1" in first.line
    resumed = _fit(  # gains to the end
        tmp_path, _stopper(cls, patience=1), 3, [0.95, 0.96, 0.97], ckpt_path=tmp_path / "last.ckpt"
    )
    assert resumed.line is None
