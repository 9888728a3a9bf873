"""Fixed random crops as views of the training split (captioning/data/crop_views.py): each crop is one
region of its image, the same in every call, process and run; items are drawn over the crops and the
whole image (and their mirrors); a feature cache computes each crop's features once."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from test_features import count_images, frozen_cnn, live_features, train_cached

from captioning.data.crop_views import CroppedSource, crop_seed
from captioning.data.datamodule import CaptionDataModule, train_view_name
from captioning.data.features import FeatureCache, content_key, image_key
from captioning.data.images import TrainAugment, image_to_tensor
from captioning.data.mirror import MirroredSource
from captioning.data.sources import CaptionSource, SyntheticSource
from captioning.data.tokenize import tokenize
from captioning.training.scst import references, scst_reward

from support.hostile import assert_one_line

VIEWS = (  # train_crop_views=2 with train_flip: the whole image and two crops, each mirrored or not
    "train",
    "train (mirrored)",
    "train (crop 1)",
    "train (crop 1, mirrored)",
    "train (crop 2)",
    "train (crop 2, mirrored)",
)


def _datamodule(**kwargs) -> CaptionDataModule:
    train_split, val = SyntheticSource(6, seed=0, split="train"), SyntheticSource(2, seed=0, split="val")
    return CaptionDataModule(train_split, val, image_size=32, **kwargs)


class Renumbered(CaptionSource):
    """``base``'s images ``order`` under the ids ``ids`` (another reader's numbering of the same files)."""

    def __init__(self, base: CaptionSource, order: list[int], ids: list[int | str]):
        self.base, self.order, self.ids = base, order, ids

    def __len__(self) -> int:
        return len(self.order)

    def image(self, i: int):
        return self.base.image(self.order[i])

    def captions(self, i: int) -> tuple[str, ...]:
        return self.base.captions(self.order[i])

    def image_id(self, i: int) -> int | str:
        return self.ids[i]


def _where(crop: np.ndarray, image: np.ndarray) -> list[tuple[int, int]]:
    """Every (top, left) at which ``crop`` (h, w, 3) is ``image``'s region, pixel for pixel."""
    h, w = crop.shape[:2]
    return [
        (top, left)
        for top in range(image.shape[0] - h + 1)
        for left in range(image.shape[1] - w + 1)
        if np.array_equal(image[top : top + h, left : left + w], crop)
    ]


def test_a_crop_view_is_a_fixed_region_of_its_image_within_the_scale() -> None:
    base, augment = SyntheticSource(8, seed=1, split="train"), TrainAugment((0.5, 0.9))
    first, second = CroppedSource(base, 1, augment), CroppedSource(base, 2, augment)
    sizes = set()
    for i in range(len(base)):
        image, crop = np.asarray(base.image(i)), np.asarray(first.image(i))
        assert _where(crop, image)  # a region of the image, not resampled pixels
        assert 0.5 - 0.05 <= crop.shape[0] * crop.shape[1] / (image.shape[0] * image.shape[1]) <= 0.9 + 0.05
        assert np.array_equal(
            np.asarray(CroppedSource(base, 1, augment).image(i)), crop
        )  # the same each time
        sizes.add((crop.shape, np.asarray(second.image(i)).shape))
        assert first.captions(i) == base.captions(i) and first.image_id(i) == base.image_id(i)
        assert first.scene(i) is None  # the scene's boxes are the whole image's
    assert any(a != b for a, b in sizes)  # view 2 is another crop
    assert first.mark == "crop1:0.5-0.9:0.75-1.3333333333333333" and second.mark.startswith("crop2:")


def test_a_crop_depends_on_the_view_the_image_and_its_id_not_on_the_order_or_the_seed() -> None:
    """A cached crop stays the crop it was: not the split's order, the process or the run's seed."""
    # Pinned: the cache keys hold neither the seed's derivation nor the box's, so a change to either would
    # serve stale crops (bump captioning.data.features.FORMAT_VERSION with it)
    assert crop_seed(1, "1000268201_693b08cb0e.jpg") == 4506455334002990145
    generator = torch.Generator().manual_seed(crop_seed(1, "1000268201_693b08cb0e.jpg"))
    assert TrainAugment((0.7, 1.0)).box(500, 375, generator) == (48, 0, 486, 375)
    augment, base = TrainAugment((0.7, 1.0)), SyntheticSource(6, seed=0, split="train")
    torch.manual_seed(123)
    a = np.asarray(CroppedSource(base, 1, augment).image(4))
    torch.manual_seed(456)
    assert np.array_equal(np.asarray(CroppedSource(base, 1, augment).image(4)), a)
    # the same image under the same id at another place in the split: the same crop, the same key
    moved = CroppedSource(Renumbered(base, [0, 4], [0, 4]), 1, augment)
    assert np.array_equal(np.asarray(moved.image(1)), a)
    assert image_key(moved, 1) == image_key(CroppedSource(base, 1, augment), 4)
    # the same image under two ids (byte-identical files, or another reader's numbering): two crops, and
    # two keys, so neither is served the other's features
    twice = CroppedSource(Renumbered(base, [4, 4], ["a.jpg", "b.jpg"]), 1, augment)
    assert not np.array_equal(np.asarray(twice.image(0)), np.asarray(twice.image(1)))
    assert image_key(twice, 0) != image_key(twice, 1) and content_key(twice, 0) != content_key(twice, 1)
    with pytest.raises(ValueError, match="view 0 is the uncropped image"):
        CroppedSource(base, 0, augment)


def test_training_items_are_drawn_uniformly_over_the_whole_image_its_crops_and_their_mirrors() -> None:
    torch.manual_seed(0)
    dm = _datamodule(train_crop_scale=[0.7, 1.0], train_crop_views=2, train_flip=True)
    assert dm.views("train") == VIEWS and dm.views("val") == ("val",)
    assert [train_view_name(c, m) for c in range(3) for m in (False, True)] == list(VIEWS)
    as_view = {v: [image_to_tensor(dm.source(v).image(i), 32) for i in range(6)] for v in VIEWS}
    dataset, drawn = dm.train_dataloader().dataset, Counter()
    for _ in range(20):
        for n, (i, k) in enumerate(dataset.index):
            item = dataset[n]
            (view,) = [v for v in VIEWS if torch.equal(item["images"], as_view[v][i])]
            assert torch.equal(item["tokens"], dm.split(view).tokens[i][k])  # the view's own caption
            drawn[view] += 1
    assert set(drawn) == set(VIEWS) and max(drawn.values()) < 1.4 * min(drawn.values())  # ~100 each
    assert all(a is b for a, b in zip(dm.split("train").tokens[0], dm.split("train (crop 2)").tokens[0]))
    val = dm.val_dataloader().dataset
    assert torch.equal(val[0]["images"], image_to_tensor(dm.sources["val"].image(0), 32))  # never cropped


def test_scst_items_of_a_crop_are_rewarded_against_its_images_references_held_once() -> None:
    torch.manual_seed(0)
    dm = _datamodule(train_crop_scale=[0.7, 1.0], train_crop_views=1, train_flip=True, train_items="images")
    assert isinstance(dm.source("train (crop 1, mirrored)").base, CroppedSource)
    distinct = dm.reference_views("train")
    assert distinct == ("train", "train (mirrored)")  # crops add no reference set: the reward's N stays
    rows_refs = references(*(dm.source(v) for v in distinct))  # the reward's rows
    n, dataset, rows = len(dm.sources["train"]), dm.train_dataloader().dataset, set()
    for _ in range(40):
        item = dataset[2]
        assert rows_refs[item["indices"]] == [" ".join(tokenize(c)) for c in item["references"]]
        pixels = [
            v for v in VIEWS[:4] if torch.equal(item["images"], image_to_tensor(dm.source(v).image(2), 32))
        ]
        mirrored = isinstance(dm.source(pixels[0]), MirroredSource)
        assert item["indices"] == (n if mirrored else 0) + 2  # a mirror's row is its swapped references'
        rows.add((pixels[0], int(item["indices"])))
    assert {view for view, _ in rows} == set(VIEWS[:4])  # every view drawn
    reward = scst_reward(*(dm.source(v) for v in distinct))
    assert reward.log_images == pytest.approx(np.log(2 * n))


def test_crop_views_are_cached_once_each_and_equal_the_encoder_on_the_cropped_pixels(tmp_path) -> None:
    cache = FeatureCache(frozen_cnn(), tmp_path, batch_size=4, progress=False)
    dm = _datamodule(train_crop_scale=[0.7, 1.0], train_crop_views=2, feature_cache=cache)
    view = "train (crop 2)"
    keys = dm.image_keys(view)
    prefix = "crop2:0.7-1.0:0.75-1.3333333333333333"  # the view, its crop settings exactly, the image id
    assert keys == [f"{prefix}:{i!r}:{base}" for i, base in enumerate(dm.image_keys("train"))]
    calls = count_images(cache.encoder)
    features = cache.features(dm.source(view), 32, keys)
    assert sum(calls) == 6
    expected = live_features(cache.encoder, dm.source(view), 32)  # the encoder on the cropped pixels
    torch.testing.assert_close(torch.stack([features(i) for i in range(6)]), expected, rtol=2e-3, atol=2e-3)
    calls.clear()
    cache.features(dm.source(view), 32, keys)
    assert calls == []  # read back, not computed again


@pytest.mark.parametrize(
    "options, named",
    [
        ({"train_crop_views": 2}, "data.train_crop_views=2 needs"),
        ({"train_crop_scale": [0.7, 1.0], "feature_cache": "cache"}, "add data.train_crop_views=K"),
    ],
    ids=["views without a scale", "fresh crops with a cache"],
)
def test_crops_the_cache_cannot_serve_are_refused_in_one_line(tmp_path, options, named) -> None:
    if options.get("feature_cache") == "cache":
        options["feature_cache"] = FeatureCache(frozen_cnn(), tmp_path, batch_size=4, progress=False)
    with pytest.raises(ValueError) as refused:
        _datamodule(**options)
    assert_one_line(str(refused.value), named)


def test_a_cached_run_with_crop_views_encodes_each_crop_once_and_trains(tmp_path) -> None:
    stored = train_cached(tmp_path, "++data.train_crop_scale=[0.7,1.0]", "++data.train_crop_views=2")
    assert len(stored) == 3 * 24 + 8  # the train scenes, two crops of each, the val scenes
    assert Counter(k.split(":")[0] for k in stored if k.startswith("crop")) == {"crop1": 24, "crop2": 24}
