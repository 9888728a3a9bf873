"""Feature cache: the same grid as the live encoder, computed once, invalidated when its inputs change."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from captioning import progress
from captioning.checkpoints.load import load_checkpoint
from captioning.compose import compose_config
from captioning.data.features import FeatureCache
from captioning.data.images import image_to_tensor
from captioning.data.readers import read_flickr8k
from captioning.data.sources import RecordSource, SyntheticSource
from captioning.inference.captioner import Captioner
from captioning.inference.evaluation import decode_source
from captioning.models.encoders import EfficientNetLiteEncoder, SmallCNN
from captioning.training.startup import check_model_config
from captioning.training.train import train

from support import CONF, FLICKR8K, HAS_FLICKR8K
from support.helpers import build_net

FLICKR8K_EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("flickr8k_*.yaml"))


def frozen_cnn(seed: int = 0) -> SmallCNN:
    """The TINY SmallCNN (16-d, 3x3 grid), frozen so it may be cached."""
    torch.manual_seed(seed)
    return SmallCNN(out_dim=16, grid_size=3, width=8).requires_grad_(False).eval()


def count_images(encoder: torch.nn.Module) -> list[int]:
    """A list that receives the batch size of every encoder forward call."""
    calls: list[int] = []
    encoder.register_forward_hook(lambda module, inputs, output: calls.append(inputs[0].shape[0]))
    return calls


def live_features(encoder, source, image_size: int) -> torch.Tensor:
    images = torch.stack([image_to_tensor(source.image(i), image_size) for i in range(len(source))])
    mean, std = torch.tensor(encoder.mean).view(1, 3, 1, 1), torch.tensor(encoder.std).view(1, 3, 1, 1)
    with torch.no_grad():
        return encoder((images - mean) / std)  # (N, L, D)


def test_cached_features_equal_the_live_encoder_through_captioner(tmp_path):
    net = build_net()  # the TINY small_cnn config: 16-d features on a 3x3 grid
    net.encoder.requires_grad_(False)
    net.eval()
    source = SyntheticSource(10, seed=3, split="val")
    features = FeatureCache(net.encoder, tmp_path, batch_size=4, progress=False).features(source, 64)
    cached = torch.stack([features(i) for i in range(len(source))])  # (10, 9, 16)
    images = torch.stack([image_to_tensor(source.image(i), 64) for i in range(len(source))])
    with torch.no_grad():
        live = net.encode(images)
    assert cached.shape == live.shape == (10, 9, 16) and cached.dtype == torch.float32
    torch.testing.assert_close(cached, live, rtol=2e-3, atol=2e-3)  # float16 storage
    (chunk,) = features.directory.glob("chunk-*.npy")
    assert np.load(chunk, mmap_mode="r").dtype == np.float16
    assert net.encode_features(cached) is cached  # a frozen encoder's cache holds the grid itself
    with pytest.raises(ValueError, match=r"expected \(B, L, D\) = \(B, 9, 16\)"):
        net.encode_features(torch.zeros(2, 4, 16))
    with pytest.raises(ValueError, match=r"takes \(B, 3, H, W\) images"):
        net.encode(cached)  # never told apart by shape: features go to encode_features


def test_caching_reports_through_the_one_progress_path_and_is_silent_with_quiet(
    tmp_path, monkeypatch, capsys
):
    """A log (not a terminal) gets whole lines, no carriage-return bar; --quiet silences caching too."""
    monkeypatch.delenv(progress.QUIET_ENV, raising=False)
    monkeypatch.setenv(progress.INTERVAL_ENV, "0")
    source = SyntheticSource(8, seed=3, split="val")
    try:
        progress.set_quiet()
        FeatureCache(frozen_cnn(), tmp_path / "quiet", batch_size=4).features(source, 64)
        assert capsys.readouterr().err == ""
        progress.set_quiet(False)
        FeatureCache(frozen_cnn(), tmp_path / "loud", batch_size=4).features(source, 64)
    finally:
        progress.set_quiet(False)
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = [line for line in err.splitlines() if line.startswith("caching features in")]
    assert [line.split(": ")[1].split(" img")[0] for line in lines] == ["4/8", "8/8"]
    assert lines[-1].endswith(tuple("0123456789")) and "done in" in lines[-1]


def test_second_run_reuses_and_a_superset_only_encodes_new_images(tmp_path):
    source = SyntheticSource(10, seed=3, split="val")
    first_encoder, second_encoder = frozen_cnn(), frozen_cnn()
    first_calls, second_calls = count_images(first_encoder), count_images(second_encoder)
    first = FeatureCache(first_encoder, tmp_path, batch_size=4, progress=False).features(source, 64)
    assert first_calls == [4, 4, 2]
    # A new process with identical weights: nothing is encoded again.
    cache = FeatureCache(second_encoder, tmp_path, batch_size=4, progress=False)
    second = cache.features(source, 64)
    assert second_calls == []
    assert all(torch.equal(first(i), second(i)) for i in range(10))
    # Scenes 0..9 of the 14-scene source are the same pixels: only 4 images are new.
    bigger = cache.features(SyntheticSource(14, seed=3, split="val"), 64)
    assert second_calls == [4]
    assert all(torch.equal(bigger(i), first(i)) for i in range(10))
    index = json.loads((cache.directory(64) / "index.json").read_text())
    assert len(index["images"]) == 14 and index["chunks"] == ["chunk-000.npy", "chunk-001.npy"]
    torch.testing.assert_close(
        torch.stack([bigger(i) for i in range(14)]),
        live_features(second_encoder, SyntheticSource(14, seed=3, split="val"), 64),
        rtol=2e-3, atol=2e-3,
    )  # fmt: skip


def photo_files(folder, n: int) -> RecordSource:
    """``n`` scene images written as PNG files under ``folder``, as a reader's records."""
    from captioning.data.readers import ImageRecord

    folder.mkdir(parents=True)
    scenes = SyntheticSource(n, seed=5, split="val")
    records = []
    for i in range(n):
        path = folder / f"img{i}.png"
        scenes.image(i).save(path)
        records.append(ImageRecord(image_id=f"img{i}", path=path, captions=("a scene",)))
    return RecordSource(records)


def test_a_copied_or_touched_dataset_is_found_by_its_bytes_not_encoded_again(tmp_path):
    import os
    import shutil

    source = photo_files(tmp_path / "photos", 5)
    cache_dir = tmp_path / "cache"
    first = FeatureCache(frozen_cnn(), cache_dir, batch_size=4, progress=False).features(source, 64)
    # The dataset re-extracted elsewhere (new paths, new mtimes), plus one image the cache never saw.
    moved = tmp_path / "moved"
    shutil.copytree(tmp_path / "photos", moved, copy_function=shutil.copy)  # copy: mtimes are new
    os.utime(moved / "img0.png", ns=(0, 0))
    SyntheticSource(6, seed=5, split="val").image(5).save(moved / "img5.png")
    from captioning.data.readers import ImageRecord

    copied = RecordSource([ImageRecord(f"img{i}", moved / f"img{i}.png", ("a scene",)) for i in range(6)])
    encoder = frozen_cnn()
    calls = count_images(encoder)
    cache = FeatureCache(encoder, cache_dir, batch_size=4, progress=False)
    second = cache.features(copied, 64)
    assert calls == [1]  # only the new image
    assert all(torch.equal(second(i), first(i)) for i in range(5))
    torch.testing.assert_close(second(5), live_features(encoder, copied, 64)[5], rtol=2e-3, atol=2e-3)
    index = json.loads((cache.directory(64) / "index.json").read_text())
    assert len(index["images"]) == 11 and len(index["content"]) == 6  # 5 + 6 file keys, 6 distinct files
    # Once aliased, the new keys are known by their stat alone: a third run neither reads nor encodes.
    again = frozen_cnn()
    again_calls = count_images(again)
    FeatureCache(again, cache_dir, progress=False).features(copied, 64)
    assert again_calls == []
    # A file whose bytes changed under the same name is encoded afresh, never served the old row.
    SyntheticSource(9, seed=5, split="val").image(8).save(moved / "img1.png")
    os.utime(moved / "img1.png", ns=(1, 1))  # a stat of its own even where mtimes are coarse
    edited = frozen_cnn()
    edited_calls = count_images(edited)
    third = FeatureCache(edited, cache_dir, progress=False).features(copied, 64)
    assert edited_calls == [1] and not torch.equal(third(1), first(1))


def test_same_image_ids_from_another_split_are_not_confused(tmp_path):
    cache = FeatureCache(frozen_cnn(), tmp_path, progress=False)
    val, test = SyntheticSource(3, split="val"), SyntheticSource(3, split="test")
    assert [val.image_id(i) for i in range(3)] == [test.image_id(i) for i in range(3)]  # 0, 1, 2 both
    val_features, test_features = cache.features(val, 64), cache.features(test, 64)
    assert not torch.allclose(val_features(0), test_features(0))
    torch.testing.assert_close(
        test_features(0), live_features(cache.encoder, test, 64)[0], rtol=2e-3, atol=2e-3
    )


def test_weight_change_or_image_size_invalidates(tmp_path):
    source = SyntheticSource(6, seed=1, split="train")
    base = FeatureCache(frozen_cnn(), tmp_path, progress=False)
    base_features = base.features(source, 64)

    changed = frozen_cnn()
    with torch.no_grad():
        changed.body[0][0].weight[0, 0, 0, 0] += 0.5
    calls = count_images(changed)
    cache = FeatureCache(changed, tmp_path, progress=False)
    assert cache.directory(64) != base.directory(64)
    new_features = cache.features(source, 64)
    assert sum(calls) == 6
    torch.testing.assert_close(
        torch.stack([new_features(i) for i in range(6)]),
        live_features(changed, source, 64),
        rtol=2e-3,
        atol=2e-3,
    )

    stats = frozen_cnn()
    stats.body[0][1].running_mean += 0.1  # BN statistics are buffers, not parameters: still part of the key
    assert FeatureCache(stats, tmp_path, progress=False).directory(64) != base.directory(64)

    calls = count_images(base.encoder)
    resized = base.features(source, 48)
    assert base.directory(48) != base.directory(64) and sum(calls) == 6
    assert not torch.allclose(resized(0), base_features(0))


def test_refuses_a_trainable_encoder(tmp_path):
    with pytest.raises(ValueError, match="frozen encoder"):
        FeatureCache(SmallCNN(out_dim=16, grid_size=3, width=8), tmp_path)


@pytest.mark.parametrize("experiment", FLICKR8K_EXPERIMENTS)
def test_flickr8k_experiments_use_cached_lite1_head_features(experiment):
    cfg, choices = compose_config("train", [f"experiment={experiment}"])
    assert choices["data"] == "flickr8k" and choices["model/encoder"] == "efficientnet_lite1"
    if experiment not in ("flickr8k_cached", "flickr8k_lstm"):  # the two shared settings choose no decoder
        decoder = "soft" if experiment == "flickr8k_finetune" else experiment.removeprefix("flickr8k_")
        assert choices["model/decoder"] == decoder  # flickr8k_finetune: soft attention, encoder fine-tuned
    assert cfg.data.feature_cache._target_ == "captioning.data.features.FeatureCache"
    assert "encoder" not in cfg.data.feature_cache  # bound to the model's own encoder (CachedEncoder)
    encoder = cfg.model.encoder
    assert (encoder.variant, encoder.stage, encoder.grid_size, encoder.freeze, cfg.data.image_size) == (
        "lite1",
        "head",
        7,
        True,
        224,
    )
    assert cfg.model.decoder.feature_dim == encoder.out_dim == 1280
    assert cfg.data.min_word_count == 5
    if experiment != "flickr8k_cached":  # the experiment's own sizes land on the decoder
        assert cfg.model.decoder.embed_dim == 256
    if experiment.startswith("flickr8k_hard"):
        assert cfg.model.decoder.alpha_c == 0.0  # eq. 14 would pull hard attention towards uniform
    check_model_config(cfg)  # every key is a constructor argument: the model builds from it


TINY_CACHED = [
    "experiment=flickr8k_cached",
    "data=synthetic",
    "debug=tiny_cached",
]  # frozen Lite0 + cache, tiny scenes


def train_cached(tmp_path, *overrides: str) -> list[str]:
    """Train TINY_CACHED (+ ``overrides``) with its cache in ``tmp_path``/cache; assert the run finished
    with steps; return the keys of the images its cache stored."""
    cfg, _ = compose_config("train", [*TINY_CACHED, f"paths.cache={tmp_path / 'cache'}", *overrides])
    cfg.output_dir = str(tmp_path / "run")
    train(cfg)
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["finished"] and run["global_step"] > 0
    (folder,) = [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]
    return list(json.loads((folder / "index.json").read_text())["images"])


def test_a_bf16_true_run_caches_and_reads_its_features(tmp_path):
    # Lightning converts the model to bf16 before the cache is prepared: the grids are encoded by a float32
    # copy of the (bf16) encoder, and the stored float32 grids are cast to the module's dtype when read.
    keys = train_cached(tmp_path, "trainer.precision=bf16-true")
    assert len(keys) == 24 + 8
    (folder,) = [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]
    grids = np.concatenate([np.load(chunk) for chunk in sorted(folder.glob("chunk-*.npy"))])  # train, val
    assert grids.shape[0] == 32 and np.isfinite(grids).all() and grids.std() > 0


def test_trained_on_cached_features_the_checkpoint_captions_raw_images(tmp_path):
    cfg, _ = compose_config("train", [*TINY_CACHED, f"paths.cache={tmp_path / 'cache'}"])
    cfg.output_dir = str(tmp_path / "run")
    checkpoint = train(cfg)
    model = load_checkpoint(checkpoint)
    cache = FeatureCache(model.net.encoder, tmp_path / "cache", progress=False)
    index = json.loads((cache.directory(64) / "index.json").read_text())
    assert len(index["images"]) == 24 + 8  # the train and val scenes training read
    calls = count_images(model.net.encoder)
    source = SyntheticSource(8, seed=0, split="val")
    from_cache = decode_source(model, source, {"num_beams": 1, "max_new_tokens": 20}, feature_cache=cache)
    assert calls == []  # the checkpoint's encoder is the one that made the cache: same key, nothing new
    from_pixels = Captioner(model).caption([source.image(i) for i in range(len(source))], num_beams=1)
    assert sum(calls) == 8
    assert from_cache.captions == [c.caption for c in from_pixels]
    for cached_att, live in zip(from_cache.attention, from_pixels):
        np.testing.assert_allclose(cached_att, live.attention.reshape(len(live.tokens), -1), atol=1e-2)


def test_the_cache_is_made_by_the_models_own_encoder_even_a_random_one(tmp_path):
    # pretrained=false: a random frozen encoder. A second encoder built for the data (the old path) would
    # be another random init; the cache is keyed and filled by the model's own, whose checkpoint finds it.
    cfg, _ = compose_config(
        "train", [*TINY_CACHED, f"paths.cache={tmp_path / 'cache'}", "model.encoder.pretrained=false"]
    )
    cfg.output_dir = str(tmp_path / "run")
    model = load_checkpoint(train(cfg))
    folders = [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]
    assert folders == [FeatureCache(model.net.encoder, tmp_path / "cache").directory(64)]


@pytest.mark.skipif(not HAS_FLICKR8K, reason="no Flickr8k (FLICKR8K_ROOT)")
def test_flickr8k_photos_cached_as_the_live_lite0_encoder_sees_them(tmp_path):
    source = RecordSource(read_flickr8k(FLICKR8K, "dev"), num_images=2)
    encoder = EfficientNetLiteEncoder(out_dim=112)  # frozen, packaged ImageNet weights
    features = FeatureCache(encoder, tmp_path, progress=False).features(source, 224)
    cached = torch.stack([features(i) for i in range(2)])
    live = live_features(encoder, source, 224)
    assert cached.shape == (2, 196, 112)
    torch.testing.assert_close(cached, live, rtol=2e-3, atol=5e-2)  # |values| up to ~50: float16 steps ~0.03


def _make_read_only(folder, monkeypatch) -> None:
    """``folder`` read-only: by chmod where that stops writes; as root (tests run so), where it does not,
    as a read-only mount looks to ``os.access``."""
    import os
    from pathlib import Path

    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o555)
    if os.access(folder, os.W_OK):  # root: chmod does not stop its writes
        real = os.access
        monkeypatch.setattr(
            os,
            "access",
            lambda p, mode, *a, **k: (
                False if mode & os.W_OK and Path(p).is_relative_to(folder) else real(p, mode, *a, **k)
            ),
        )


def test_a_read_only_feature_cache_is_one_line_naming_the_folder_and_serves_what_it_holds(
    tmp_path, monkeypatch
):
    from captioning.data.readers import DatasetError

    source = SyntheticSource(4, seed=3, split="val")
    empty = tmp_path / "empty"
    _make_read_only(empty, monkeypatch)
    lacking = r"4 image\(s\) not in it, e.g. pixels:\(96, 96\):[0-9a-f]+; "  # the first missing key named
    with pytest.raises(
        DatasetError, match=rf"^{empty}: {lacking}cannot store the cached features there \(the folder "
    ):
        FeatureCache(frozen_cnn(), empty, progress=False).features(source, 64)
    full = tmp_path / "full"
    expected = FeatureCache(frozen_cnn(), full, progress=False).features(source, 64)
    _make_read_only(full, monkeypatch)
    for path in full.rglob("*"):
        path.chmod(0o444 if path.is_file() else 0o555)
    encoder = frozen_cnn()
    calls = count_images(encoder)
    features = FeatureCache(encoder, full, progress=False).features(source, 64)  # all cached: read only
    assert calls == [] and torch.equal(features(2), expected(2))


def test_a_read_only_image_check_cache_is_one_line_naming_the_folder(tmp_path, photo, monkeypatch):
    from captioning.data.readers import DatasetError
    from captioning.data.verify import check_images

    cache = tmp_path / "cache"
    _make_read_only(cache, monkeypatch)
    with pytest.raises(
        DatasetError,
        match=rf"data.check_cache={cache}: cannot store the image checks there \(the folder {cache}",
    ):
        check_images([photo], cache)
