"""EarlyStopping (captioning/training/callbacks/early_stopping.py): patience counts the validations of the
schedule; the one Lightning adds when something else stops a run mid-epoch (``trainer.max_time``) is run and
logged but not counted, so a run cut by a wall-clock limit and resumed stops where the uninterrupted one does."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytorch_lightning as pl
import yaml
from pytorch_lightning.callbacks import EarlyStopping as LightningEarlyStopping

from captioning.compose import CONFIG_DIR
from captioning.training.callbacks.early_stopping import EarlyStopping

from support.scored_module import BATCHES, ScoredModule


class _StopAt(pl.Callback):
    """What the Timer of ``trainer.max_time`` does when time is up: ``should_stop`` at a batch's end."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            trainer.should_stop = True


def _fit(stopper_class, stop_step: int, tmp_path: Path) -> tuple[ScoredModule, LightningEarlyStopping]:
    module = ScoredModule([1.0, 0.5, 0.5, 0.5])
    stopper = stopper_class(monitor="v", mode="max", patience=2, check_on_train_epoch_end=False)
    trainer = pl.Trainer(
        max_epochs=3, callbacks=[stopper, _StopAt(stop_step)], logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        default_root_dir=tmp_path,
    )  # fmt: skip
    trainer.fit(module)
    return module, stopper


def test_the_validation_a_mid_epoch_stop_adds_runs_but_is_not_counted(tmp_path):
    mid = BATCHES + 2  # epoch 1, its third batch
    module, stopper = _fit(EarlyStopping, mid, tmp_path)
    assert module.validations == [(0, BATCHES), (1, mid)]  # the stop's validation ran (and was logged)
    assert stopper.wait_count == 0 and float(stopper.best_score) == 1.0  # but patience did not count it
    # Lightning's own class counts it: the run resumed from this state would stop one validation early
    module, lightning = _fit(LightningEarlyStopping, mid, tmp_path)
    assert module.validations == [(0, BATCHES), (1, mid)] and lightning.wait_count == 1


def test_a_stop_at_the_epochs_last_batch_is_a_scheduled_validation_and_counts(tmp_path):
    module, stopper = _fit(EarlyStopping, 2 * BATCHES, tmp_path)
    assert module.validations == [(0, BATCHES), (1, 2 * BATCHES)]
    assert stopper.wait_count == 1  # the epoch's own validation: counted as without a stop


def test_without_a_stop_patience_ends_the_run_as_lightnings_does(tmp_path):
    module, stopper = _fit(EarlyStopping, -1, tmp_path)
    assert module.validations == [(0, BATCHES), (1, 2 * BATCHES), (2, 3 * BATCHES)]
    assert stopper.wait_count == 2 and stopper.stopped_epoch == 2


def _early_stopping_nodes() -> list[tuple[str, dict]]:
    found = []
    for path in sorted(Path(CONFIG_DIR).rglob("*.yaml")):
        node = ((yaml.safe_load(path.read_text()) or {}).get("callbacks") or {}).get("early_stopping")
        if isinstance(node, dict):
            found.append((str(path.relative_to(CONFIG_DIR)), node))
    return found


@pytest.mark.parametrize("name,node", _early_stopping_nodes(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_config_with_early_stopping_uses_the_class_that_skips_a_stops_validation(name, node):
    assert node["_target_"] == "captioning.training.callbacks.early_stopping.EarlyStopping", name


def test_a_stopped_run_resumed_with_more_patience_trains_on(tmp_path):
    """Lightning's class restores the saved patience: resumed with patience 5 (the stop's own line advises
    callbacks.early_stopping.patience=N), the run stopped again at its first validation."""
    from pytorch_lightning.callbacks import ModelCheckpoint

    def fit(stopper, epochs, values, folder, ckpt_path=None):
        module = ScoredModule(values)
        keep = ModelCheckpoint(dirpath=folder, save_last=True)
        trainer = pl.Trainer(
            max_epochs=epochs, callbacks=[stopper, keep], logger=False, enable_progress_bar=False,
            enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=tmp_path,
        )  # fmt: skip
        trainer.fit(module, ckpt_path=ckpt_path)
        return module, trainer

    first = EarlyStopping(monitor="v", mode="max", patience=1, check_on_train_epoch_end=False)
    fit(first, 5, [0.9, 0.5], tmp_path / "first")  # stopped after epoch 1
    assert first.stopped_epoch == 1
    for cls, trained_on in ((EarlyStopping, True), (LightningEarlyStopping, False)):
        stopper = cls(monitor="v", mode="max", patience=5, check_on_train_epoch_end=False)
        folder = tmp_path / cls.__module__
        module, trainer = fit(stopper, 5, [0.5] * 6, folder, ckpt_path=tmp_path / "first" / "last.ckpt")
        assert stopper.patience == (5 if trained_on else 1)
        assert (trainer.current_epoch >= 4) is trained_on, (cls, module.validations)
