"""LightningDataModule over any caption source: vocabulary, padding collate, loaders.

Training samples are (image, one caption) pairs, so every reference is seen once per epoch; validation
and test samples are images with all their references (the metrics need every reference).
Images leave the data module as float tensors in [0, 1]; the encoder applies its own normalisation.
With a ``feature_cache`` (a frozen encoder, or the frozen prefix of a fine-tuned one) batches carry no
pixels: ``image_keys`` (``captioning.data.features.image_key``) name the images, and the LightningModule
asks the model's ``CachedEncoder`` (built from the model's own encoder, ``feature_cache`` holding only the
cache's settings) for their ``features``. Batches name what they carry, ``images`` or ``image_keys``.
Training images may be augmented (``train_crop_scale``, ``train_crop_views``, ``train_flip``); validation
and test images never. A flip is a view of its own (``captioning.data.mirror``): the training split
mirrored, its captions' "left" and "right" swapped, served from the feature cache like the originals; so is
each of K fixed crops (``captioning.data.crop_views``). Each training item is drawn uniformly from the
training split's views: the image or one of its crops, mirrored or not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import pytorch_lightning as pl
import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

from captioning.bounds import AtLeast, Between, check_bounds
from captioning.data.crop_views import CroppedSource
from captioning.data.features import image_key
from captioning.data.images import TrainAugment, image_to_tensor
from captioning.data.mirror import MirroredSource
from captioning.data.resumable import EpochShuffle, ResumableLoader
from captioning.data.sources import CaptionSource, MissingSplit, RecordSource
from captioning.data.tokenize import tokenize
from captioning.data.verify import POLICIES, apply_policy, check_images
from captioning.data.vocab import Vocab

if TYPE_CHECKING:
    from captioning.data.features import FeatureCache


def train_view_name(crop: int, mirrored: bool) -> str:
    """The name of a view of the training split: "train", "train (mirrored)", "train (crop 2)", "train
    (crop 2, mirrored)" (crop 0: the whole image)."""
    marks = ([f"crop {crop}"] if crop else []) + (["mirrored"] if mirrored else [])
    return f"train ({', '.join(marks)})" if marks else "train"


MIRRORED_TRAIN = train_view_name(0, True)  # the view of the training split that train_flip adds


@dataclass
class EncodedSplit:
    source: CaptionSource
    tokens: list[list[Tensor]]  # per image, per reference: (T,) ids with <start>/<end>


def encode_split(
    source: CaptionSource, vocab: Vocab, max_length: int, like: EncodedSplit | None = None
) -> EncodedSplit:
    """``source``'s captions as ids; a caption equal to ``like``'s (the same image's, the same place) shares
    its tensor: a mirrored split differs from its base in ~0.4% of its captions."""
    tokens = []
    for i in range(len(source)):
        same = like.source.captions(i) if like is not None else ()
        row = []
        for k, caption in enumerate(source.captions(i)):
            if k < len(same) and same[k] == caption:
                row.append(like.tokens[i][k])
            else:  # truncated to max_length words, keeping <end> so the model still learns to stop
                row.append(torch.tensor(vocab.encode(tokenize(caption)[:max_length])))
        tokens.append(row)
    return EncodedSplit(source, tokens)


class ImageLoader:
    """``loader(i)`` -> image i of a source as a (3, S, S) tensor: the model input without a feature cache
    (augmented afresh on every call with an ``augment``, the training split's)."""

    def __init__(self, source: CaptionSource, image_size: int, augment: TrainAugment | None = None):
        self.source, self.image_size, self.augment = source, image_size, augment

    def __call__(self, i: int) -> Tensor:
        if self.augment is not None:
            return self.augment(self.source.image(i), self.image_size)
        return image_to_tensor(self.source.image(i), self.image_size)


class ImageKeys:
    """``keys(i)`` -> the ``image_key`` of image i: what a feature cache looks its features up by."""

    def __init__(self, keys: list[str]):
        self.keys = list(keys)

    def __call__(self, i: int) -> str:
        return self.keys[i]


Inputs = ImageLoader | ImageKeys  # image index -> (3, S, S) image, or the image's key in the feature cache
View = tuple[EncodedSplit, Inputs]  # a split's captions and images: as they are, or mirrored (train_flip)


def _input(inputs: Inputs, i: int) -> dict:
    return {"image_keys" if isinstance(inputs, ImageKeys) else "images": inputs(i)}


def _pick(views: list[View]) -> int:
    """The number of one of the views, uniformly; no draw when there is one (a run without views draws
    as before). Drawn from torch's generator, as fresh crops are: Lightning seeds it per DataLoader worker."""
    return int(torch.randint(len(views), ())) if len(views) > 1 else 0


class PairDataset(Dataset):
    """One (image, caption) pair per item: image i with caption k (of one of ``views``, drawn per item:
    the image and its mirror with the caption's sides swapped, for ``train_flip``)."""

    def __init__(self, views: list[View]):
        self.views = list(views)
        self.split = self.views[0][0]  # the split as it is (a mirror's items are the same images)
        self.index = [(i, k) for i, caps in enumerate(self.split.tokens) for k in range(len(caps))]

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, n: int) -> dict:
        i, k = self.index[n]
        split, inputs = self.views[_pick(self.views)]
        return {
            **_input(inputs, i),
            "tokens": split.tokens[i][k],
            "image_ids": split.source.image_id(i),
        }


class ImageDataset(Dataset):
    """One image per item with all its references (and the first one encoded, for a val loss); with
    several ``views`` (a training split's crops and mirrors, for SCST), one of them, drawn per item.
    ``blocks[v]``: which of the distinct reference sets view v's references are (a crop's are its image's;
    ``CaptionDataModule.reference_views``), so ``indices`` is the item's row in their concatenation."""

    def __init__(self, views: list[View], blocks: list[int] | None = None):
        self.views = list(views)
        self.blocks = list(range(len(self.views))) if blocks is None else list(blocks)
        self.split = self.views[0][0]  # the split as it is (what callbacks show: wandb_table)

    def __len__(self) -> int:
        return len(self.split.source)

    def __getitem__(self, i: int) -> dict:
        view = _pick(self.views)
        split, inputs = self.views[view]
        src = split.source
        return {
            **_input(inputs, i),
            "tokens": split.tokens[i][0],
            "image_ids": src.image_id(i),
            "references": list(src.captions(i)),
            "indices": self.blocks[view] * len(src) + i,  # its row in the distinct reference sets
            "scenes": src.scene(i),  # None for photos
        }


def collate(items: list[dict]) -> dict:
    batch = {
        "tokens": pad_sequence([it["tokens"] for it in items], batch_first=True, padding_value=Vocab.pad_id),
        "image_ids": [it["image_ids"] for it in items],
    }
    if "images" in items[0]:
        batch["images"] = torch.stack([it["images"] for it in items])  # (B, 3, S, S)
    else:
        batch["image_keys"] = [it["image_keys"] for it in items]  # the features: CachedEncoder.lookup
    if "references" in items[0]:
        batch["references"] = [it["references"] for it in items]
        batch["indices"] = torch.tensor([it["indices"] for it in items])
        batch["scenes"] = [it.get("scenes") for it in items]
    return batch


class CaptionDataModule(pl.LightningDataModule):
    def __init__(
        self,
        train: CaptionSource,
        val: CaptionSource,
        test: CaptionSource | None = None,
        image_size: Annotated[int, Between(8, 2048)] = 96,
        batch_size: Annotated[int, AtLeast(1)] = 64,
        eval_batch_size: Annotated[int, AtLeast(1)] = 128,
        num_workers: Annotated[int, AtLeast(0)] = 0,
        min_word_count: Annotated[int, AtLeast(1)] = 1,
        max_caption_length: Annotated[int, AtLeast(1)] = 30,
        feature_cache: FeatureCache | None = None,
        train_items: str = "pairs",
        on_bad_image: str = "skip",
        max_bad_fraction: Annotated[float, Between(0, 1)] = 0.01,
        check_cache: str | None = None,
        skipped_list: str | None = None,
        train_crop_scale: list[float] | None = None,
        train_crop_views: Annotated[int, AtLeast(0)] = 0,
        train_flip: bool = False,
    ):
        """``train_items``: "pairs" (one image-caption pair per item, cross-entropy) or "images" (one image
        with all its references per item, for sequence-level objectives such as self-critical training).
        ``on_bad_image``: "skip" (default) or "raise" for unreadable images of image-file data sets, checked
        before the vocabulary is built (``captioning.data.verify``; verdicts cached in ``check_cache``,
        skipped files listed in ``skipped_list``), at most ``max_bad_fraction`` of a split skipped.
        ``train_crop_scale`` [min, max]: training images are random crops of that share of the area (null:
        none); a fresh crop per item, or with ``train_crop_views`` = K > 0 one of K crops drawn once per image
        (``captioning.data.crop_views``), which a ``feature_cache`` serves (fresh crops it cannot);
        ``train_flip``: each training item is mirrored half the time, its captions' "left" and "right"
        swapped (``captioning.data.mirror``); with a ``feature_cache`` the mirrored images' features are
        cached once beside the originals'."""
        check_bounds("data", CaptionDataModule, locals())  # the bounds in the signature above
        super().__init__()
        if test is None:  # never an alias of val: a "test" score of the dev images would be a lie
            test = MissingSplit("the data config has no test split (data.test is null); evaluate split=val")
        self.sources = {"train": train, "val": val, "test": test}
        self.image_size, self.batch_size, self.eval_batch_size = image_size, batch_size, eval_batch_size
        self.num_workers, self.min_word_count = num_workers, min_word_count
        self.max_caption_length = max_caption_length
        self.feature_cache = (
            feature_cache  # its settings: the LightningModule binds it to the model's encoder
        )
        self._keys: dict[str, list[str]] = {}
        # The training order's seed: torch's when the module is built (the run's: train() seeds first). Read
        # now, not when the loader is built, so it stays shared after each DDP process reseeds its own draws
        # (training/distributed.py): the processes' shares of one order, not of one order each
        self.order_seed = torch.initial_seed()
        if train_items not in ("pairs", "images"):
            raise ValueError(f"data.train_items={train_items!r}: expected 'pairs' or 'images'")
        self.train_items = train_items
        if on_bad_image not in POLICIES:
            raise ValueError(f"data.on_bad_image={on_bad_image!r}: expected one of {POLICIES}")
        self.on_bad_image, self.max_bad_fraction = on_bad_image, max_bad_fraction
        self.check_cache, self.skipped_list = check_cache, skipped_list
        if train_crop_views and train_crop_scale is None:
            raise ValueError(
                f"data.train_crop_views={train_crop_views} needs the crops' share of the area: "
                "data.train_crop_scale=[min, max] (e.g. [0.7, 1.0])"
            )
        if train_crop_scale is not None and not train_crop_views and feature_cache is not None:
            raise ValueError(
                "data.train_crop_scale alone crops afresh every epoch, so cached features cannot stand for "
                "the pixels: add data.train_crop_views=K (K crops per image, cached once) or drop "
                "data.feature_cache (data.train_flip goes with both)"
            )
        crops = None if train_crop_scale is None else TrainAugment(tuple(train_crop_scale))
        self.crops = crops if train_crop_views else None  # fixed crops, each a view
        self.train_augment = None if train_crop_views else crops  # a fresh crop per item
        # The training split's views, each item drawn from one of them: name -> (crop 0..K, mirrored)
        flips = (False, True) if train_flip else (False,)
        self.train_views = {train_view_name(c, m): (c, m) for c in range(train_crop_views + 1) for m in flips}
        self._checked = False
        self.vocab: Vocab | None = None
        self.splits: dict[str, EncodedSplit] = {}

    def check_images(self) -> None:
        """Decode every image of the image-file splits once (cached); skip or raise per ``on_bad_image``."""
        if self._checked:
            return
        self._checked = True
        for name, source in self.sources.items():
            if not isinstance(source, RecordSource):
                continue  # synthetic scenes, missing splits: nothing on disk to check
            bad = check_images([r.path for r in source.records], self.check_cache)
            listing = f"{self.skipped_list}.{name}.txt" if self.skipped_list else None
            apply_policy(name, bad, len(source), self.on_bad_image, self.max_bad_fraction, listing)
            if bad:
                self.sources[name] = RecordSource([r for i, r in enumerate(source.records) if i not in bad])

    def build_vocab(self) -> Vocab:
        """The vocabulary of the training captions (deterministic: the same on every DDP rank)."""
        self.check_images()
        if self.vocab is None:
            src = self.sources["train"]
            captions = (tokenize(c) for i in range(len(src)) for c in src.vocabulary_captions(i))
            self.vocab = Vocab.build(captions, min_count=self.min_word_count)
        return self.vocab

    def source(self, name: str) -> CaptionSource:
        """The source of split ``name``, or of a view of the training split (``views``): "train (crop 2,
        mirrored)" is the training images' crop 2, mirrored, their captions' sides swapped."""
        if name == "train" or name not in self.train_views:
            return self.sources[name]
        self.check_images()  # a view is of the checked split
        crop, mirrored = self.train_views[name]
        source = self.sources["train"]
        if crop:
            source = CroppedSource(source, crop, self.crops)
        return MirroredSource(source) if mirrored else source

    def views(self, name: str) -> tuple[str, ...]:
        """What the items of split ``name`` are drawn from: the split itself; for "train", each of its views
        (its K fixed crops with ``train_crop_views``, and every one's mirror with ``train_flip``), "train"
        first."""
        return tuple(self.train_views) if name == "train" else (name,)

    def reference_views(self, name: str) -> tuple[str, ...]:
        """The views of split ``name`` whose references differ, in ``views``' order: the split, and with
        ``train_flip`` its mirror (a crop's references are its image's). SCST's reward holds theirs,
        concatenated; a training item's ``indices`` is its row there (``ImageDataset``)."""
        return tuple(v for v in self.views(name) if not self.train_views.get(v, (0, False))[0])

    def _reference_blocks(self, name: str) -> list[int]:
        """For each view of split ``name``, the position of its references in ``reference_views``."""
        distinct = self.reference_views(name)
        crop_of = {v: train_view_name(0, m) for v, (_, m) in self.train_views.items()}  # its uncropped view
        return [distinct.index(crop_of.get(v, v)) for v in self.views(name)]

    def split(self, name: str) -> EncodedSplit:
        if name not in self.splits:
            # a view's captions are the training split's (a crop's all of them, a mirror's all but ~0.4%)
            like = self.split("train") if name != "train" and name in self.train_views else None
            self.splits[name] = encode_split(
                self.source(name), self.build_vocab(), self.max_caption_length, like
            )
        return self.splits[name]

    def setup(self, stage: str | None = None) -> None:
        self.build_vocab()

    def image_keys(self, name: str) -> list[str]:
        """The ``image_key`` of every image of split ``name`` (computed once: a scene's key hashes its pixels)."""
        if name not in self._keys:
            self.build_vocab()  # drops unreadable images first
            source = self.source(name)
            self._keys[name] = [image_key(source, i) for i in range(len(source))]
        return self._keys[name]

    def inputs(self, name: str) -> Inputs:
        """What the items of split ``name`` carry: images, or with a feature cache their keys."""
        if self.feature_cache is None:
            training = name in self.views("train")
            return ImageLoader(self.source(name), self.image_size, self.train_augment if training else None)
        return ImageKeys(self.image_keys(name))

    def _views(self, name: str) -> list[View]:
        return [(self.split(view), self.inputs(view)) for view in self.views(name)]

    def _loader(self, dataset: Dataset, batch_size: int, shuffle: bool) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            collate_fn=collate,
            persistent_workers=self.num_workers > 0,
            drop_last=False,
            # Each iterator draws its workers' base seed from here, not from torch's global generator, so
            # an evaluation changes no training draw (dropout masks): a resumed run creates validation
            # iterators the uninterrupted run does not (Lightning's restart at an epoch's end creates one)
            generator=torch.Generator().manual_seed(0),
        )

    def train_dataloader(self) -> DataLoader:
        views = self._views("train")
        if self.train_items == "pairs":
            dataset: Dataset = PairDataset(views)
        else:
            dataset = ImageDataset(views, self._reference_blocks("train"))
        return ResumableLoader(  # a run resumed mid-epoch goes on with the same batches (resumable.py)
            dataset,
            self.batch_size,
            self._train_position,
            sampler=EpochShuffle(dataset, seed=self.order_seed),
            num_workers=self.num_workers,
            collate_fn=collate,
            persistent_workers=self.num_workers > 0,
        )

    def _train_position(self) -> tuple[int, int] | None:
        """(current epoch, batches trained in it): read at a checkpoint save, inside a training batch's end
        hooks, after the epoch's validation or at the epoch's end, when ``processed`` counts the batch just
        trained. Once the epoch is complete (a SIGTERM's save after it) ``current_epoch`` counts it while
        the batches are still its own: the next epoch at its start."""
        trainer = self.trainer
        if trainer is None:
            return None
        epochs, batches = trainer.fit_loop.epoch_progress.current, trainer.fit_loop.epoch_loop.batch_progress
        # Not ``epochs.started``: Lightning resuming from an epoch's last batch never counts the next epoch
        # as started (periodic_checkpoint.py); ``current_epoch`` is right inside it.
        if epochs.started == epochs.completed and batches.is_last_batch:
            return trainer.current_epoch, 0
        return trainer.current_epoch, batches.current.processed

    def val_dataloader(self) -> DataLoader:
        return self._loader(ImageDataset(self._views("val")), self.eval_batch_size, False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(ImageDataset(self._views("test")), self.eval_batch_size, False)
