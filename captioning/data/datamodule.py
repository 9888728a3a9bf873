"""LightningDataModule over any caption source: vocabulary, padding collate, loaders.

Training samples are (image, one caption) pairs, so every reference is seen once per epoch; validation
and test samples are images with all their references (the metrics need every reference).
Images leave the data module as float tensors in [0, 1]; the encoder applies its own normalisation.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytorch_lightning as pl
import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import functional as TF

from captioning.data.sources import CaptionSource
from captioning.data.tokenize import tokenize
from captioning.data.vocab import Vocab


def image_to_tensor(image, image_size: int) -> Tensor:
    """PIL RGB -> (3, S, S) float in [0, 1], resized (not cropped) so nothing the caption names is cut."""
    if image.size != (image_size, image_size):
        image = image.resize((image_size, image_size), resample=3)  # bicubic
    return TF.pil_to_tensor(image).float().div_(255.0)  # (3, S, S)


@dataclass
class EncodedSplit:
    source: CaptionSource
    tokens: list[list[Tensor]]  # per image, per reference: (T,) ids with <start>/<end>


def encode_split(source: CaptionSource, vocab: Vocab, max_length: int) -> EncodedSplit:
    tokens = []
    for i in range(len(source)):
        # Truncate to max_length words, keeping <end> so the model still learns to stop.
        tokens.append([torch.tensor(vocab.encode(tokenize(c)[:max_length])) for c in source.captions(i)])
    return EncodedSplit(source, tokens)


class PairDataset(Dataset):
    """One (image, caption) pair per item: image i with caption k."""

    def __init__(self, split: EncodedSplit, image_size: int):
        self.split, self.image_size = split, image_size
        self.index = [(i, k) for i, caps in enumerate(split.tokens) for k in range(len(caps))]

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, n: int) -> dict:
        i, k = self.index[n]
        image = image_to_tensor(self.split.source.image(i), self.image_size)
        return {"images": image, "tokens": self.split.tokens[i][k], "image_ids": self.split.source.image_id(i)}


class ImageDataset(Dataset):
    """One image per item with all its references (and the first one encoded, for a val loss)."""

    def __init__(self, split: EncodedSplit, image_size: int):
        self.split, self.image_size = split, image_size

    def __len__(self) -> int:
        return len(self.split.source)

    def __getitem__(self, i: int) -> dict:
        src = self.split.source
        return {
            "images": image_to_tensor(src.image(i), self.image_size),
            "tokens": self.split.tokens[i][0],
            "image_ids": src.image_id(i),
            "references": list(src.captions(i)),
            "indices": i,
        }


def collate(items: list[dict]) -> dict:
    batch = {
        "images": torch.stack([it["images"] for it in items]),  # (B, 3, S, S)
        "tokens": pad_sequence([it["tokens"] for it in items], batch_first=True, padding_value=Vocab.pad_id),
        "image_ids": [it["image_ids"] for it in items],
    }
    if "references" in items[0]:
        batch["references"] = [it["references"] for it in items]
        batch["indices"] = torch.tensor([it["indices"] for it in items])
    return batch


class CaptionDataModule(pl.LightningDataModule):
    def __init__(
        self,
        train: CaptionSource,
        val: CaptionSource,
        test: CaptionSource | None = None,
        image_size: int = 96,
        batch_size: int = 64,
        eval_batch_size: int = 128,
        num_workers: int = 0,
        min_word_count: int = 1,
        max_caption_length: int = 30,
    ):
        super().__init__()
        if batch_size <= 0 or eval_batch_size <= 0:
            raise ValueError(f"batch sizes must be positive, got {batch_size} and {eval_batch_size}")
        self.sources = {"train": train, "val": val, "test": test if test is not None else val}
        self.image_size, self.batch_size, self.eval_batch_size = image_size, batch_size, eval_batch_size
        self.num_workers, self.min_word_count = num_workers, min_word_count
        self.max_caption_length = max_caption_length
        self.vocab: Vocab | None = None
        self.splits: dict[str, EncodedSplit] = {}

    def build_vocab(self) -> Vocab:
        """The vocabulary of the training captions (deterministic: the same on every DDP rank)."""
        if self.vocab is None:
            src = self.sources["train"]
            captions = (tokenize(c) for i in range(len(src)) for c in src.captions(i))
            self.vocab = Vocab.build(captions, min_count=self.min_word_count)
        return self.vocab

    def split(self, name: str) -> EncodedSplit:
        if name not in self.splits:
            self.splits[name] = encode_split(self.sources[name], self.build_vocab(), self.max_caption_length)
        return self.splits[name]

    def setup(self, stage: str | None = None) -> None:
        self.build_vocab()

    def _loader(self, dataset: Dataset, batch_size: int, shuffle: bool) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            collate_fn=collate,
            persistent_workers=self.num_workers > 0,
            drop_last=False,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(PairDataset(self.split("train"), self.image_size), self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(ImageDataset(self.split("val"), self.image_size), self.eval_batch_size, False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(ImageDataset(self.split("test"), self.image_size), self.eval_batch_size, False)
