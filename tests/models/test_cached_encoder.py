"""The frozen encoder owns its cache: batches carry ``images`` or ``image_keys`` (-> ``features``), never one
under the other's name; the model's own encoder keys the cache, so caches made before stay valid."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from captioning.compose import compose_config
from captioning.data.datamodule import CaptionDataModule
from captioning.data.features import FORMAT_VERSION, CachedEncoder, FeatureCache
from captioning.data.sources import SyntheticSource
from captioning.hashing import encoder_identity
from captioning.models.decoders.base import shift_inputs
from captioning.models.encoders import SmallCNN
from captioning.training.lit_module import CaptionLitModule

from support.helpers import build_net

SIZE = 64


def frozen_net(vocab_size: int = 12):
    net = build_net(vocab_size=vocab_size)  # the TINY small_cnn config: 16-d features on a 3x3 grid
    net.encoder.requires_grad_(False)
    return net.eval()


def stem_calls(encoder: torch.nn.Module) -> list[int]:
    """Batch sizes of every call of the encoder's conv stem (its first stage)."""
    calls: list[int] = []
    stem = encoder.get_submodule(encoder._stages[0][1][0])
    stem.register_forward_hook(lambda module, inputs, output: calls.append(inputs[0].shape[0]))
    return calls


def datamodule(feature_cache=None) -> CaptionDataModule:
    train, val = SyntheticSource(6, seed=0, split="train"), SyntheticSource(4, seed=1, split="val")
    return CaptionDataModule(
        train, val, image_size=SIZE, batch_size=4, eval_batch_size=4, feature_cache=feature_cache
    )


def first_batch(dm: CaptionDataModule) -> dict:
    return next(iter(dm.val_dataloader()))


def test_a_cached_batch_and_an_image_batch_give_the_same_outputs(tmp_path):
    settings = FeatureCache(cache_dir=tmp_path, progress=False)  # data.feature_cache: settings, no encoder
    cached_dm, image_dm = datamodule(settings), datamodule()
    cached_dm.build_vocab(), image_dm.build_vocab()
    net = frozen_net(len(cached_dm.vocab))
    cached_encoder = CachedEncoder(settings.bind(net.encoder), SIZE)
    cached_encoder.add(cached_dm.sources["val"], cached_dm.image_keys("val"))

    by_key, by_image = first_batch(cached_dm), first_batch(image_dm)
    assert "images" not in by_key and "features" not in by_key and len(by_key["image_keys"]) == 4
    assert "image_keys" not in by_image and by_image["images"].shape == (4, 3, SIZE, SIZE)

    features = cached_encoder.lookup(by_key["image_keys"])  # (B, L, D) float32
    inputs, _ = shift_inputs(by_image["tokens"])
    with torch.no_grad():
        from_cache = net(tokens=inputs, features=features)
        from_images = net(by_image["images"], inputs)
        torch.testing.assert_close(net.encode_batch({"features": features}), net.encode(by_image["images"]),
                                   rtol=2e-3, atol=2e-3)  # fmt: skip  # float16 storage
    torch.testing.assert_close(from_cache.logits, from_images.logits, rtol=2e-3, atol=2e-3)

    # The LightningModule asks the model's cached encoder for a batch of keys' features, before transfer.
    module = CaptionLitModule(net.encoder, net.decoder, cached_dm.vocab.to_dict(), image_size=SIZE)
    module.cached_encoder = cached_encoder
    batch = module.on_before_batch_transfer(dict(by_key), 0)
    assert torch.equal(batch["features"], features)


def test_a_batch_with_features_never_runs_the_conv_stem(tmp_path):
    net = frozen_net()
    calls = stem_calls(net.encoder)
    source = SyntheticSource(5, seed=2, split="val")
    cached = CachedEncoder(FeatureCache(cache_dir=tmp_path, progress=False).bind(net.encoder), SIZE)
    cached.add(source)
    assert calls == [5]  # encoding the cache ran it once per image
    calls.clear()
    from captioning.data.features import image_key

    features = cached.lookup([image_key(source, i) for i in range(5)])
    with torch.no_grad():
        net.encode_batch({"features": features})
        net(tokens=torch.ones(5, 3, dtype=torch.long), features=features)
    assert calls == []
    with torch.no_grad():
        net.encode_batch({"images": torch.rand(2, 3, SIZE, SIZE)})
    assert calls == [2]
    with pytest.raises(ValueError, match="takes \\(B, 3, H, W\\) images"):
        net.encode(features)  # no shape sniffing: features are never read as images or passed through
    with pytest.raises(ValueError, match="exactly one"):
        net(torch.rand(2, 3, SIZE, SIZE), torch.ones(2, 3, dtype=torch.long), features=features[:2])


def test_a_prefix_batch_runs_only_the_trained_stages(tmp_path):
    torch.manual_seed(0)
    encoder = SmallCNN(out_dim=16, grid_size=3, width=8, freeze=True, fine_tune_from="stage2").eval()
    calls = stem_calls(encoder)
    source = SyntheticSource(3, seed=0, split="val")
    cached = CachedEncoder(FeatureCache(cache_dir=tmp_path, progress=False).bind(encoder), SIZE)
    cached.add(source)
    assert cached.prefix == 2 and calls == [3]
    calls.clear()
    net = build_net()
    net.encoder = encoder
    from captioning.data.features import image_key

    activations = cached.lookup([image_key(source, i) for i in range(3)])  # (3, C, h, w)
    with torch.no_grad():
        grid = net.encode_batch({"features": activations})
    assert calls == [] and grid.shape == (3, 9, 16)


def _old_directory(encoder, cache_dir: Path, image_size: int) -> Path:
    """The cache folder as the code before CachedEncoder named it (a whole frozen encoder's grid)."""
    ingredients = {
        "format": FORMAT_VERSION,
        **encoder_identity(encoder, image_size),
        "dtype": np.dtype(np.float16).name,
    }
    digest = hashlib.sha256(json.dumps(ingredients, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir / f"{type(encoder).__name__}-{image_size}px-{digest}"


def test_a_cache_made_by_the_old_path_is_found_and_not_recomputed(tmp_path):
    # The old path: FeatureCache(encoder, ...) on a second, identically built encoder (data.feature_cache's).
    torch.manual_seed(0)
    second = SmallCNN(out_dim=16, grid_size=3, width=8).requires_grad_(False).eval()
    source = SyntheticSource(6, seed=0, split="val")
    old = FeatureCache(second, tmp_path, progress=False)
    old.features(source, SIZE)
    assert old.directory(SIZE) == _old_directory(second, tmp_path, SIZE)
    # The new path: the model's own encoder, bound to the settings, finds that folder and encodes nothing.
    torch.manual_seed(0)
    own = SmallCNN(out_dim=16, grid_size=3, width=8).requires_grad_(False)
    own.train()  # a training model's mode: the key does not depend on it, and it is left as it was
    calls = stem_calls(own)
    cached = CachedEncoder(FeatureCache(cache_dir=tmp_path, progress=False).bind(own), SIZE)
    cached.add(source)
    assert calls == [] and cached.directory == old.directory(SIZE) and own.training
    assert len(list(cached.directory.glob("chunk-*.npy"))) == 1


def test_the_running_jobs_lite1_cache_keeps_its_folder_name(tmp_path):
    """experiment=flickr8k_cached's cache (frozen Lite1 head, 7x7 at 224 px), made before CachedEncoder:
    the model's own encoder still names the same folder, EfficientNetLiteEncoder-224px-d84335d1e8ed5b61."""
    import hydra

    cfg, _ = compose_config("train", ["experiment=flickr8k_cached"])
    try:
        encoder = hydra.utils.instantiate(cfg.model.encoder)
    except Exception as err:  # noqa: BLE001 - the pip package's weights may be absent
        pytest.skip(f"Lite1 weights not available: {err}")
    settings = hydra.utils.instantiate(cfg.data.feature_cache, cache_dir=tmp_path)
    assert not isinstance(getattr(settings, "encoder", None), torch.nn.Module)  # no second encoder built
    directory = settings.bind(encoder).directory(cfg.data.image_size)
    assert directory.name == "EfficientNetLiteEncoder-224px-d84335d1e8ed5b61"
