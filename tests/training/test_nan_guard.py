"""A NaN/inf loss stops training with a message naming the step; the last good checkpoint stays as it was."""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from captioning.training.callbacks.finite_loss import FiniteLossGuard, NonFiniteLossError
from captioning.training.lit_module import CaptionLitModule
from captioning.training.train import train

from support import TINY, compose_train

BAD_STEP = 4  # the loss of the batch taken at global step 4 is NaN; last.ckpt is written every 2 steps


def test_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path: Path, monkeypatch) -> None:
    last = tmp_path / "checkpoints" / "last.ckpt"
    at_failure: dict = {}
    real_step = CaptionLitModule.training_step

    def poisoned_step(self, batch, batch_idx):
        loss = real_step(self, batch, batch_idx)
        if self.trainer.global_step == BAD_STEP:
            at_failure["digest"] = hashlib.sha256(last.read_bytes()).hexdigest()  # last.ckpt on disk now
            at_failure["module"] = self
            return loss * float("nan")
        return loss

    monkeypatch.setattr(CaptionLitModule, "training_step", poisoned_step)
    cfg = compose_train(
        [*TINY, "trainer.max_epochs=1", "callbacks.last_checkpoint.every_n_train_steps=2"], tmp_path
    )
    with pytest.raises(NonFiniteLossError) as info:
        train(cfg)

    message = str(info.value)
    assert f"non-finite training loss at global step {BAD_STEP} (epoch 0, batch {BAD_STEP}" in message
    assert "this rank's loss: nan" in message
    assert f"The last good checkpoint is {last} (resume with ckpt_path=last)" in message
    # Nothing was written after the bad step, and what is on disk is the finite state of step 4.
    assert hashlib.sha256(last.read_bytes()).hexdigest() == at_failure["digest"]
    saved = torch.load(last, weights_only=True)
    assert saved["global_step"] == BAD_STEP
    assert all(torch.isfinite(t).all() for t in saved["state_dict"].values())
    # The bad batch never reached the weights: no backward, no optimizer step. (Its forward pass did move
    # BatchNorm running statistics, which is why nothing may be saved after it.)
    for name, tensor in at_failure["module"].named_parameters():
        assert torch.equal(tensor, saved["state_dict"][name]), name


def _trainer_stub(global_step: int, finite_everywhere: bool | None = None) -> SimpleNamespace:
    def reduce_boolean_decision(decision: bool, all: bool = True) -> bool:  # noqa: A002 - Lightning's name
        return decision if finite_everywhere is None else finite_everywhere

    strategy = SimpleNamespace(reduce_boolean_decision=reduce_boolean_decision)
    return SimpleNamespace(global_step=global_step, strategy=strategy, callbacks=[], current_epoch=2)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_the_guard_refuses_every_non_finite_loss(value: float) -> None:
    guard = FiniteLossGuard()
    trainer = _trainer_stub(global_step=17)
    guard.on_train_batch_start(trainer, torch.nn.Linear(2, 2), None, batch_idx=3)
    with pytest.raises(NonFiniteLossError, match=r"at global step 17 \(epoch 2, batch 3;") as info:
        guard.on_before_backward(trainer, None, torch.tensor(value))
    assert f"this rank's loss: {value}" in str(info.value)
    assert "No checkpoint had been written yet." in str(info.value)


def test_the_guard_passes_finite_losses_and_follows_other_ranks() -> None:
    guard = FiniteLossGuard()
    guard.on_before_backward(_trainer_stub(global_step=1), None, torch.tensor(2.5))  # no error
    # Finite here but NaN on another rank: every rank must stop together, or DDP would hang.
    with pytest.raises(NonFiniteLossError, match="this rank's loss: 2.5"):
        guard.on_before_backward(
            _trainer_stub(global_step=1, finite_everywhere=False), None, torch.tensor(2.5)
        )


def test_the_guard_refuses_weights_an_update_broke_before_the_next_step() -> None:
    layer = torch.nn.Linear(2, 2)
    with torch.no_grad():
        layer.weight[0, 0] = float("nan")  # the loss that made this update was finite
    with pytest.raises(
        NonFiniteLossError, match=r"non-finite weights \(NaN/inf\) before global step 9 .* in weight"
    ):
        FiniteLossGuard().on_train_batch_start(_trainer_stub(global_step=9), layer, None, batch_idx=0)


def test_non_finite_weights_are_never_written_nor_loaded(tmp_path):
    """A checkpoint on disk is never called good wrongly: inf weights are refused on save and on load."""
    import pytest
    import torch

    from captioning.checkpoints.load import CheckpointError, load_checkpoint
    from captioning.checkpoints.save import AtomicCheckpointIO, NonFiniteWeightsError

    from support.corpus import build_module, checkpoint_dict

    checkpoint = checkpoint_dict(build_module(["a", "red", "circle"]))
    name = next(k for k, v in checkpoint["state_dict"].items() if v.is_floating_point())
    checkpoint["state_dict"][name] = torch.full_like(checkpoint["state_dict"][name], float("inf"))
    target = tmp_path / "last.ckpt"
    with pytest.raises(NonFiniteWeightsError, match=f"not written: non-finite weights .* in {name}"):
        AtomicCheckpointIO().save_checkpoint(checkpoint, target)
    assert not target.exists() and not list(tmp_path.iterdir())
    torch.save(checkpoint, target)  # written behind our back
    with pytest.raises(CheckpointError, match="refused: non-finite weights"):
        load_checkpoint(target)
