"""Encoder fine-tuning: named stages in every family, fine_tune_from / bn_eval / lr_scale, the prefix
feature cache (frozen stages cached, trained ones live), training-only image augmentation."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from captioning.checkpoints.load import load_checkpoint
from captioning.compose import compose_config
from captioning.data.datamodule import CaptionDataModule
from captioning.data.features import FeatureCache
from captioning.data.images import image_to_tensor
from captioning.data.sources import SyntheticSource
from captioning.data.vocab import Vocab
from captioning.models.encoders import EfficientNetLiteEncoder, TorchvisionEncoder
from captioning.training.build import build_model
from captioning.training.train import train

from support.encoders import FAMILIES

LAST_STAGE = {
    "small_cnn": "stage3",
    "resnet18": "stage4",
    "lite0_stride16": "stage5",
    "lite0_head": "head",
    "lite1_multilevel": "head",
}


def _trained_stages(encoder: nn.Module) -> list[str]:
    """The stages with a trainable parameter, checking each stage is wholly trained or wholly frozen."""
    trained = []
    for name, modules in encoder._stages:
        flags = {p.requires_grad for m in modules for p in encoder.get_submodule(m).parameters()}
        assert len(flags) <= 1, f"stage {name} is half frozen"
        if flags == {True}:
            trained.append(name)
    return trained


def _bn_buffers(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items() if "running" in k or "num_batches" in k}


@pytest.mark.parametrize("family", FAMILIES)
def test_fine_tune_from_none_last_all_trains_the_named_stages(family: str) -> None:
    make = FAMILIES[family]
    names = make(freeze=True).stage_names
    assert names[0] == "stem" and names[-1] == LAST_STAGE[family]
    assert _trained_stages(make(freeze=True)) == []
    frozen = make(freeze=True)
    assert not frozen.trainable and frozen.cache_stop == len(names)
    last = make(freeze=True, fine_tune_from="last")
    assert _trained_stages(last) == [LAST_STAGE[family]]
    assert _trained_stages(make(freeze=True, fine_tune_from="all")) == list(names)
    assert _trained_stages(make(freeze=False)) == list(names)
    assert _trained_stages(make(freeze=True, fine_tune_from=names[-2])) == list(names[-2:])
    assert _trained_stages(make(freeze=True, fine_tune_from=2)) == list(names[names.index("stage2") :])
    with pytest.raises(ValueError, match="fine_tune_from='stage99', expected null, 'all', 'last', a stage"):
        make(freeze=True, fine_tune_from="stage99")
    with pytest.raises(ValueError, match="freeze=True"):
        make(freeze=False, fine_tune_from="last")
    with pytest.raises(ValueError, match="lr_scale must be > 0"):
        make(freeze=True, lr_scale=0.0)
    with pytest.raises(ValueError, match="lr_scale must be > 0 and <= 10"):
        make(freeze=True, lr_scale=11.0)  # beyond the bound declared once in captioning.bounds.LR_SCALE
    assert make(freeze=True, lr_scale=10.0).lr_scale == 10.0


def test_resnet_fine_tune_from_numbers_keep_their_meaning() -> None:
    by_number = TorchvisionEncoder("resnet18", pretrained=False, fine_tune_from=3)
    assert _trained_stages(by_number) == ["stage3", "stage4"]  # layer3, layer4, as before stage names


def test_param_groups_have_the_decoder_lr_and_the_scaled_encoder_lr() -> None:
    overrides = ["debug=tiny", "model.encoder.freeze=true", "model.encoder.fine_tune_from=last"]
    cfg, _ = compose_config("train", [*overrides, "model.encoder.lr_scale=0.1"])
    model = build_model(cfg.model, Vocab.build([["a", "red", "square"]]))
    model.scheduler_factory = None  # the groups, without a trainer to count steps
    optimizer = model.configure_optimizers()
    decoder_group, encoder_group = optimizer.param_groups
    assert decoder_group["lr"] == pytest.approx(3e-3) and encoder_group["lr"] == pytest.approx(3e-4)
    trained = [p for p in model.net.encoder.parameters() if p.requires_grad]
    assert {id(p) for p in encoder_group["params"]} == {id(p) for p in trained} and trained
    assert {id(p) for p in decoder_group["params"]} == {id(p) for p in model.net.decoder.parameters()}
    assert decoder_group["weight_decay"] == encoder_group["weight_decay"]  # norms/biases: same rule
    cfg, _ = compose_config("train", overrides)  # lr_scale 1 (the from-scratch default): one group
    single = build_model(cfg.model, Vocab.build([["a"]]))
    single.scheduler_factory = None
    assert len(single.configure_optimizers().param_groups) == 1


@pytest.mark.parametrize("bn_eval", [True, False])
def test_bn_eval_keeps_running_stats_through_a_training_step(bn_eval: bool) -> None:
    torch.manual_seed(0)
    encoder = FAMILIES["lite0_head"](freeze=True, fine_tune_from="stage7", bn_eval=bn_eval).train()
    trainable = [p for p in encoder.parameters() if p.requires_grad]
    before, weights = _bn_buffers(encoder), [p.detach().clone() for p in trainable]
    optimizer = torch.optim.SGD(trainable, lr=0.1)
    encoder(torch.randn(4, 3, 64, 64) * 2 + 0.5).square().mean().backward()
    optimizer.step()
    after = _bn_buffers(encoder)
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert any(not torch.equal(p, w) for p, w in zip(trainable, weights))  # the trained stages learn
    if bn_eval:
        assert changed == set()
    else:  # only the trained stages' statistics move; the frozen prefix's never do
        assert changed and all(k.startswith(("head.", "blocks.15.")) for k in changed)


@pytest.mark.parametrize(
    ("family", "stop"),
    [
        ("small_cnn", "stage2"),
        ("resnet18", "stage4"),
        ("lite0_stride16", "stage5"),
        ("lite0_head", "stage7"),
        ("lite1_multilevel", "stage7"),
    ],
)
def test_prefix_cache_plus_trained_suffix_equals_the_full_encoder(tmp_path, family: str, stop: str) -> None:
    torch.manual_seed(0)
    encoder = FAMILIES[family](freeze=True, fine_tune_from=stop).eval()
    if family.startswith("lite"):  # ImageNet weights: random ones give activations float16 cannot hold
        variant, stage = family.split("_")
        encoder = EfficientNetLiteEncoder(
            variant=variant, stage=stage, grid_size=2, fine_tune_from=stop
        ).eval()
    source = SyntheticSource(3, seed=0, split="val")
    images = torch.stack([image_to_tensor(source.image(i), 64) for i in range(3)])  # (3, 3, 64, 64)
    with torch.no_grad():
        full = encoder.encode(images)  # (3, L, D)
        prefix = encoder.encode_prefix(images)  # (3, C, h, w)
        assert prefix.shape[1] == encoder.prefix_channels != 3
        torch.testing.assert_close(
            encoder.forward_from(prefix, encoder.cache_stop), full, rtol=1e-5, atol=1e-5
        )
        cache = FeatureCache(encoder, tmp_path, progress=False)
        cached = cache.features(source, 64)
        # float16 storage
        from_cache = encoder.forward_from(torch.stack([cached(i) for i in range(3)]), encoder.cache_stop)
    scale = full.abs().max()
    torch.testing.assert_close(from_cache / scale, full / scale, rtol=0, atol=1e-2)
    expected = "stage6" if family == "lite1_multilevel" else stop  # multilevel reads the stride-16 map
    assert cache.stops_before == expected and f"before-{expected}-" in cache.directory(64).name


def test_prefix_cache_key_follows_the_prefix_weights_and_stop_only(tmp_path) -> None:
    make = FAMILIES["lite0_head"]
    torch.manual_seed(0)
    base = make(freeze=True, fine_tune_from="stage7")
    key = FeatureCache(base, tmp_path).directory(64)
    suffix_trained = make(freeze=True, fine_tune_from="stage7")
    suffix_trained.load_state_dict(base.state_dict())
    with torch.no_grad():
        suffix_trained.head[0].weight.add_(1.0)  # training changes the suffix: the cache stays valid
    assert FeatureCache(suffix_trained, tmp_path).directory(64) == key
    prefix_changed = make(freeze=True, fine_tune_from="stage7")
    prefix_changed.load_state_dict(base.state_dict())
    with torch.no_grad():
        prefix_changed.stem[0].weight.add_(1.0)
    assert FeatureCache(prefix_changed, tmp_path).directory(64) != key
    other_stop = make(freeze=True, fine_tune_from="stage6")
    other_stop.load_state_dict(base.state_dict())
    assert FeatureCache(other_stop, tmp_path).directory(64) != key
    assert FeatureCache(base, tmp_path).directory(48) != key  # image size, as for whole grids
    frozen = make(freeze=True)
    frozen.load_state_dict(base.state_dict())
    assert "before-" not in FeatureCache(frozen, tmp_path).directory(64).name
    with pytest.raises(ValueError, match="trains every stage"):
        FeatureCache(make(freeze=True, fine_tune_from="all"), tmp_path)


def _datamodule(**kwargs) -> CaptionDataModule:
    train, val = SyntheticSource(4, seed=0, split="train"), SyntheticSource(2, seed=0, split="val")
    return CaptionDataModule(train, val, image_size=64, **kwargs)


def test_augmentation_changes_training_images_not_eval_images() -> None:
    torch.manual_seed(0)
    dm = _datamodule(train_crop_scale=[0.7, 1.0])
    plain = image_to_tensor(dm.sources["train"].image(0), 64)
    train_inputs = dm.inputs("train")
    draws = [train_inputs(0) for _ in range(4)]
    assert all(d.shape == plain.shape for d in draws)
    assert all(not torch.equal(d, plain) for d in draws) and not torch.equal(draws[0], draws[1])
    val_inputs = dm.inputs("val")
    expected = image_to_tensor(dm.sources["val"].image(1), 64)
    assert torch.equal(val_inputs(1), expected) and torch.equal(val_inputs(1), expected)
    assert torch.equal(_datamodule().inputs("train")(0), plain)  # off by default
    # flips: tests/data/test_mirror.py (the mirror is a view with its captions' sides swapped)


def test_crops_with_a_bad_scale_are_refused() -> None:
    # fresh crops with a feature cache: tests/data/test_crop_views.py
    with pytest.raises(ValueError, match=r"crop_scale=\[0.0, 1.0\]: expected \[min, max\]"):
        _datamodule(train_crop_scale=[0.0, 1.0])


def test_flickr8k_finetune_experiment_states_stage_lr_bn_and_caches_the_prefix() -> None:
    cfg, choices = compose_config("train", ["experiment=flickr8k_finetune"])
    assert choices["model/decoder"] == "soft" and choices["model/encoder"] == "efficientnet_lite1"
    enc = cfg.model.encoder
    assert (enc.stage, enc.fine_tune_from, enc.bn_eval, enc.lr_scale) == ("head", "stage7", True, 0.1)
    assert "encoder" not in cfg.data.feature_cache and cfg.data.train_crop_scale is None
    assert not cfg.data.train_flip and cfg.data.train_crop_views == 0
    assert "unfreeze_encoder" not in cfg.callbacks and cfg.trainer.max_epochs == 5  # from the first step


def test_tiny_fine_tuning_run_trains_only_the_suffix_from_cached_activations(tmp_path) -> None:
    cache_dir = tmp_path / "cache"
    cfg, _ = compose_config(
        "train",
        [
            "experiment=flickr8k_finetune",
            "data=synthetic",
            "debug=tiny_cached",
            f"paths.cache={cache_dir}",
        ],
    )
    cfg.output_dir = str(tmp_path / "run")
    checkpoint = train(cfg)
    folders = [p.name for p in cache_dir.iterdir() if p.is_dir() and "before-" in p.name]
    assert len(folders) == 1 and "-before-stage7-" in folders[0]  # the prefix, not the grid, was cached
    trained = load_checkpoint(checkpoint).net.encoder
    pretrained = EfficientNetLiteEncoder(variant="lite1", stage="head", grid_size=3, out_dim=1280)
    mine, theirs = trained.state_dict(), pretrained.state_dict()
    changed = {k.split(".")[0] for k in mine if not torch.equal(mine[k], theirs[k])}
    assert changed == {"blocks", "head"}
    moved = {
        int(k.split(".")[1]) for k in mine if k.startswith("blocks.") and not torch.equal(mine[k], theirs[k])
    }
    assert moved == {len(trained.blocks) - 1}  # stage7 is Lite1's last block; stem..stage6 untouched
    bn = [k for k in mine if "running" in k]
    assert all(torch.equal(mine[k], theirs[k]) for k in bn)  # bn_eval: ImageNet statistics kept
