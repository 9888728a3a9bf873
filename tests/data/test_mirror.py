"""Flips that keep captions true (captioning/data/mirror.py): side words swapped with the pixels, and the
mirrored training split served like any split, from pixels or from the feature cache."""

from __future__ import annotations

import pytest
import torch
from PIL import ImageOps
from test_features import count_images, frozen_cnn, live_features, train_cached

from captioning.data.datamodule import MIRRORED_TRAIN, CaptionDataModule
from captioning.data.features import FeatureCache
from captioning.data.images import image_to_tensor
from captioning.data.mirror import MirroredSource, swap_sides
from captioning.data.readers import read_flickr8k
from captioning.data.sources import SyntheticSource
from captioning.data.tokenize import tokenize
from captioning.training.scst import scst_reward
from captioning.training.train import train

from support import FLICKR8K, HAS_FLICKR8K, TINY, compose_train

SWAPPED = [  # (caption, as it reads in the mirror)
    ("a man holds a cup in his left hand", "a man holds a cup in his right hand"),
    ("A dog runs to the right .", "A dog runs to the left ."),
    ("Left of the tree stands a boy", "Right of the tree stands a boy"),
    ("the rightmost girl waves her right-handed racket", "the leftmost girl waves her left-handed racket"),
    ("a small red circle in the top right and a blue one in the bottom left",
     "a small red circle in the top left and a blue one in the bottom right"),
    ("to the right in the picture", "to the left in the picture"),  # a side, whatever follows "the right"
    ("RIGHT side up", "LEFT side up"),
    ("a dog looks left and right", "a dog looks right and left"),
    ("a man training a dog to attack his padded left arm", "a man training a dog to attack his padded right arm"),
]  # fmt: skip
ONE_WAY = [  # a side, whose mirror word reads as no side: "right at" is mostly "exactly at"
    ("a boy turns left at the corner", "a boy turns right at the corner"),
]
KEPT = [  # no side meant
    "a dog walks right behind its owner",
    "a girl stands right in front of a fountain",
    "a bag was left on the bench",
    "a bag left on the bench",
    "only three pieces left",
    "The man left the room",
    "two horses are right alongside each other",
    'the words " Look Right " painted on a street',  # what a sign says
    "the people have left",
    "a puppy is left alone in the yard",
    "the water left behind by the tide",
    "a brightly lit street with leftover snow",  # words that only contain the letters
]


@pytest.mark.parametrize(("caption", "mirrored"), SWAPPED)
def test_side_words_swap_keeping_case_and_punctuation(caption, mirrored) -> None:
    assert swap_sides(caption) == mirrored
    assert swap_sides(mirrored) == caption  # the mirror of the mirror is the photo


@pytest.mark.parametrize(("caption", "mirrored"), ONE_WAY)
def test_a_side_before_an_intensifier_word_swaps_one_way(caption, mirrored) -> None:
    assert swap_sides(caption) == mirrored and swap_sides(mirrored) == mirrored


@pytest.mark.parametrize("caption", KEPT)
def test_words_that_name_no_side_are_kept(caption) -> None:
    assert swap_sides(caption) == caption


@pytest.mark.skipif(not HAS_FLICKR8K, reason="../shared/data/flickr8k is not here")
def test_flickr8k_captions_change_only_in_their_side_words() -> None:
    records = read_flickr8k(FLICKR8K, "train") + read_flickr8k(FLICKR8K, "val")
    captions = [c for r in records for c in r.captions]
    changed = [(c, swap_sides(c)) for c in captions if swap_sides(c) != c]
    assert 0 < len(changed) < 0.01 * len(captions)  # ~0.4% name a side
    side = {"left", "right", "leftmost", "rightmost", "lefthand", "righthand", "lefthanded", "righthanded"}
    for caption, mirrored in changed:
        before, after = tokenize(caption), tokenize(mirrored)
        assert len(before) == len(after)
        assert all(a == b or {a, b} <= side and a != b for a, b in zip(before, after)), caption


def test_a_mirrored_source_is_its_base_mirrored_with_swapped_captions() -> None:
    base = SyntheticSource(4, seed=0, split="train")
    mirror = MirroredSource(base)
    assert len(mirror) == 4
    for i in range(4):
        assert mirror.image(i).tobytes() == ImageOps.mirror(base.image(i)).tobytes()
        assert mirror.captions(i) == tuple(swap_sides(c) for c in base.captions(i))
        assert mirror.image_id(i) == base.image_id(i) and mirror.scene(i) is None
    assert any(mirror.captions(i) != base.captions(i) for i in range(4))  # the scenes name sides


def _datamodule(**kwargs) -> CaptionDataModule:
    train_split, val = SyntheticSource(6, seed=0, split="train"), SyntheticSource(2, seed=0, split="val")
    return CaptionDataModule(train_split, val, image_size=32, **kwargs)


def _mirrored_items(dm: CaptionDataModule, key: str) -> list[bool]:
    """Draw every training pair ten times; check each is the pair or its mirror as a whole (pixels or
    cache key with the tokens of the same view); return whether each draw was mirrored."""
    dataset = dm.train_dataloader().dataset
    plain = dm.split("train")
    mirror = dm.split(MIRRORED_TRAIN) if MIRRORED_TRAIN in dm.views("train") else None  # off: never drawn
    drawn = []
    for _ in range(10):
        for n, (i, k) in enumerate(dataset.index):
            item = dataset[n]
            if key == "images":
                as_plain = image_to_tensor(dm.sources["train"].image(i), 32)
                is_mirror = torch.equal(item["images"], as_plain.flip(-1))
                assert is_mirror or torch.equal(item["images"], as_plain)
            else:
                is_mirror = mirror is not None and item["image_keys"] == dm.image_keys(MIRRORED_TRAIN)[i]
                assert is_mirror or item["image_keys"] == dm.image_keys("train")[i]
            assert torch.equal(item["tokens"], (mirror if is_mirror else plain).tokens[i][k])
            drawn.append(is_mirror)
    return drawn


def test_flipped_pairs_carry_the_mirror_image_with_its_swapped_caption() -> None:
    torch.manual_seed(0)
    flipped = _datamodule(train_flip=True)
    drawn = _mirrored_items(flipped, "images")
    plain, mirror = flipped.split("train"), flipped.split(MIRRORED_TRAIN)
    shared = [a is b for i in range(6) for a, b in zip(plain.tokens[i], mirror.tokens[i])]
    same = [a == b for i in range(6) for a, b in zip(plain.source.captions(i), mirror.source.captions(i))]
    assert shared == same and not all(same)  # a caption with no side word is one tensor for both views
    assert 0.4 < sum(drawn) / len(drawn) < 0.6  # 300 draws, half mirrored
    assert _mirrored_items(_datamodule(), "images") == [False] * len(drawn)  # off by default
    dm = _datamodule(train_flip=True)
    assert dm.views("train") == ("train", MIRRORED_TRAIN) and dm.views("val") == ("val",)
    val = dm.val_dataloader().dataset
    for i in range(2):  # validation is never flipped
        assert torch.equal(val[i]["images"], image_to_tensor(dm.sources["val"].image(i), 32))
        assert val[i]["references"] == list(dm.sources["val"].captions(i))


def test_scst_items_carry_the_mirrors_swapped_references() -> None:
    torch.manual_seed(0)
    dm = _datamodule(train_flip=True, train_items="images")
    dataset = dm.train_dataloader().dataset
    seen = set()
    for _ in range(8):
        item = dataset[1]
        plain = image_to_tensor(dm.sources["train"].image(1), 32)
        mirrored = torch.equal(item["images"], plain.flip(-1))
        source = MirroredSource(dm.sources["train"]) if mirrored else dm.sources["train"]
        assert item["references"] == list(source.captions(1))
        seen.add(mirrored)
    assert seen == {True, False}


def test_the_scst_reward_scores_a_mirrored_item_against_its_own_swapped_references() -> None:
    torch.manual_seed(0)
    dm = _datamodule(train_flip=True, train_items="images")
    reward = scst_reward(*(dm.source(view) for view in dm.views("train")))
    dataset, n = dm.train_dataloader().dataset, len(dm.sources["train"])
    i = next(
        i
        for i in range(n)
        if MirroredSource(dm.sources["train"]).captions(i) != dm.sources["train"].captions(i)
    )
    rows = set()
    for _ in range(12):
        item = dataset[i]
        rows.add(item["indices"])
        own, other = (
            item["references"][0],
            swap_sides(item["references"][0]),
        )  # its own words, and the mirror's
        assert reward.scores([own], [item["indices"]])[0] > reward.scores([other], [item["indices"]])[0]
    assert rows == {i, n + i}  # the image's row, and its mirror's after the split's N


def test_an_scst_run_with_flips_rewards_both_views(tmp_path, monkeypatch) -> None:
    rows: list[int] = []
    made = []

    def recording_reward(*sources, **options):
        made.append(len(sources))
        reward = scst_reward(*sources, **options)
        scores = reward.scores
        reward.scores = lambda captions, images: rows.extend(images) or scores(captions, images)
        return reward

    monkeypatch.setattr("captioning.training.scst.scst_reward", recording_reward)
    xe = train(compose_train([*TINY, "trainer.max_steps=2"], tmp_path / "xe"))
    overrides = [*TINY, "objective=scst", f"init_from={xe}", "trainer.max_steps=4", "model.num_samples=2",
                 "++data.train_flip=true"]  # fmt: skip
    train(compose_train(overrides, tmp_path / "scst"))
    assert made == [2]  # the training split and its mirror
    assert max(rows) >= 24 and min(rows) < 24  # TINY's 24 training scenes: both views were scored


def test_flips_are_cached_beside_the_originals(tmp_path) -> None:
    cache = FeatureCache(frozen_cnn(), tmp_path, batch_size=4, progress=False)
    dm = _datamodule(train_flip=True, feature_cache=cache)
    keys, mirror_keys = dm.image_keys("train"), dm.image_keys(MIRRORED_TRAIN)
    assert all(m == f"mirrored:{k}" for k, m in zip(keys, mirror_keys))
    calls = count_images(cache.encoder)
    features = cache.features(dm.source(MIRRORED_TRAIN), 32, mirror_keys)
    assert sum(calls) == 6
    expected = live_features(
        cache.encoder, dm.source(MIRRORED_TRAIN), 32
    )  # the encoder on the mirrored pixels
    torch.testing.assert_close(torch.stack([features(i) for i in range(6)]), expected, rtol=2e-3, atol=2e-3)
    torch.manual_seed(0)
    drawn = _mirrored_items(dm, "image_keys")
    assert 0.4 < sum(drawn) / len(drawn) < 0.6


def test_a_cached_run_with_flips_encodes_each_mirror_once_and_trains(tmp_path) -> None:
    stored = train_cached(tmp_path, "++data.train_flip=true")
    assert len(stored) == 24 + 24 + 8  # the train scenes, their mirrors, the val scenes
    assert sum(k.startswith("mirrored:") for k in stored) == 24
