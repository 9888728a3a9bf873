"""Staged fine-tuning: ImageEncoder.hold and the UnfreezeEncoder callback (captioning/training/callbacks/
unfreeze_encoder.py). Held stages give the frozen encoder's output and receive no update; released, they train;
the phase follows the epoch, so a resumed run lands in the right one."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from captioning.models.encoders import SmallCNN
from captioning.training.callbacks.unfreeze_encoder import UnfreezeEncoder

from support.encoders import FAMILIES


def _encoder() -> SmallCNN:
    torch.manual_seed(0)
    return SmallCNN(out_dim=16, grid_size=3, width=8, freeze=True, fine_tune_from="stage3", bn_eval=False)


def _module(encoder: nn.Module) -> SimpleNamespace:
    return SimpleNamespace(net=SimpleNamespace(encoder=encoder))


def _trainer(epoch: int, world_size: int = 1, ddp_kwargs: dict | None = None) -> SimpleNamespace:
    strategy = SimpleNamespace(_ddp_kwargs=ddp_kwargs) if ddp_kwargs is not None else SimpleNamespace()
    return SimpleNamespace(current_epoch=epoch, is_global_zero=True, world_size=world_size, strategy=strategy)


def _step(encoder: nn.Module, optimizer: torch.optim.Optimizer, images: torch.Tensor) -> None:
    optimizer.zero_grad()
    encoder.encode(images).pow(2).mean().backward()  # (B, L, D) -> a scalar that depends on every weight
    optimizer.step()


def test_held_stages_keep_weights_and_bn_statistics_then_train_when_released() -> None:
    encoder, images = _encoder(), torch.rand(4, 3, 24, 24)
    encoder.train()
    optimizer = torch.optim.AdamW(
        [p for p in encoder.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.1
    )
    before = {k: v.clone() for k, v in encoder.state_dict().items()}  # keys body.<stage index>.*
    encoder.hold(True)
    assert encoder.trainable  # held is not frozen: the optimizer group and the cache prefix stay as they are
    assert all(not m.training for m in encoder.get_submodule("body.3").modules())  # eval: BN statistics fixed
    assert not encoder.encode(images).requires_grad  # no graph through the held stages
    with torch.no_grad():
        held_out = encoder.encode(images)
    optimizer.zero_grad()
    # the (held) encoder output feeds a trained head: its loss backpropagates without touching the encoder
    head = nn.Linear(16, 1)
    head(encoder.encode(images)).mean().backward()
    optimizer.step()  # AdamW skips grad-less parameters: no update, no weight decay
    assert all(torch.equal(v, before[k]) for k, v in encoder.state_dict().items())
    encoder.eval()
    assert torch.allclose(held_out, encoder.encode(images))  # held output = the eval-mode (frozen) output

    encoder.train()
    encoder.hold(False)
    assert encoder.get_submodule("body.3").training
    _step(encoder, optimizer, images)
    after = encoder.state_dict()
    changed = {k.split(".")[1] for k in after if not torch.equal(after[k], before[k])}
    assert changed == {"3"}  # the trained stage moved; the frozen prefix did not


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_holds_its_trained_stages_on_images_and_cached_prefixes(family: str) -> None:
    torch.manual_seed(0)
    # every family's own wiring must pass through the hold (EfficientNet-Lite's once bypassed it)
    encoder = FAMILIES[family](freeze=True, fine_tune_from="last").train()
    trained = [p for p in encoder.parameters() if p.requires_grad]
    images = torch.rand(2, 3, 64, 64)
    prefix = encoder.encode_prefix(images)  # (B, C, h, w): what the feature cache stores
    encoder.hold(True)
    for grid in (encoder.encode(images), encoder.encode(prefix)):
        assert not grid.requires_grad  # no graph through the held stages, whichever the input
    encoder.hold(False)
    for grid in (encoder.encode(images), encoder.encode(prefix)):
        grid.sum().backward()
    assert trained and all(p.grad is not None for p in trained)  # released: they get gradients


def test_a_fully_frozen_encoder_has_nothing_to_hold() -> None:
    frozen = SmallCNN(out_dim=16, grid_size=3, width=8, freeze=True)
    with pytest.raises(ValueError, match="no stage trains"):
        frozen.hold(True)
    with pytest.raises(
        ValueError, match=r"callbacks.unfreeze_encoder: model.encoder \(SmallCNN\) trains no stage"
    ):
        UnfreezeEncoder(at_epoch=1).on_fit_start(_trainer(0), _module(frozen))


@pytest.mark.parametrize("at_epoch", [-1, 1.5, True, "2"])
def test_a_bad_epoch_is_refused_with_its_value(at_epoch) -> None:
    with pytest.raises(
        ValueError,
        match=rf"callbacks.unfreeze_encoder.at_epoch={re.escape(repr(at_epoch))}: expected an integer",
    ):
        UnfreezeEncoder(at_epoch=at_epoch)


@pytest.mark.parametrize("start_epoch", [0, 1, 2, 3])
def test_the_phase_follows_the_epoch_also_when_resumed_there(start_epoch: int) -> None:
    encoder = _encoder()
    callback, module = UnfreezeEncoder(at_epoch=2), _module(encoder)
    callback.on_fit_start(_trainer(start_epoch), module)  # a fresh run (0) or one resumed at start_epoch
    phases = []
    for epoch in range(start_epoch, 4):
        callback.on_train_epoch_start(_trainer(epoch), module)
        phases.append(encoder.held)
    assert phases == [epoch < 2 for epoch in range(start_epoch, 4)]


def test_ddp_without_unused_parameter_detection_is_refused_while_stages_are_held() -> None:
    callback = UnfreezeEncoder(at_epoch=1)
    with pytest.raises(ValueError, match="use trainer.strategy=ddp_find_unused_parameters_true"):
        callback.on_fit_start(_trainer(0, world_size=2, ddp_kwargs={}), _module(_encoder()))
    callback.on_fit_start(
        _trainer(0, world_size=2, ddp_kwargs={"find_unused_parameters": True}), _module(_encoder())
    )
    callback.on_fit_start(
        _trainer(1, world_size=2, ddp_kwargs={}), _module(_encoder())
    )  # resumed past the hold
