"""Random crops that a feature cache can serve: K fixed crops of every training image, each a view.

A fresh random crop per step (``TrainAugment``, ``data.train_crop_scale`` alone) changes the pixels every
epoch, so every step runs the whole encoder. ``data.train_crop_views=K`` draws K crops of each training
image once instead: crop k of image i is a function of k, the image (its id and its size) and the crop
settings, so it is the same in every epoch, run, seed and process, and its encoder features are computed
once into the cache beside the originals' (K times the originals' caching time, once). Each training item
is then drawn from the whole image or one of its K crops, uniformly (with ``data.train_flip``, from their
mirrors too): augmentation at the cached step's cost. What fixed crops give up against fresh ones is variety: K + 1
versions of a photo, where fresh crops give one per item drawn (a Flickr8k photo is drawn once per caption
per epoch: 25 times in a 5-epoch recipe).

The crop's captions are the photo's: a crop keeps 70% of the area or more by default
(``TrainAugment``), so what a caption names is rarely cut out.
"""

from __future__ import annotations

import hashlib

import torch
from PIL import Image

from captioning.data.images import TrainAugment
from captioning.data.sources import CaptionSource, SourceView


def crop_seed(view: int, image_id: int | str) -> int:
    """The seed of crop ``view`` of the image ``image_id``: stable across processes and machines (not
    Python's salted ``hash``), so a cached crop's features stay the crop's."""
    digest = hashlib.sha1(f"crop {view} of {image_id}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1  # < 2**63: torch's seeds


class CroppedSource(SourceView):
    """``base`` with image i cropped by crop number ``view`` (1..K) of ``augment``'s distribution; its
    captions are the base's. The cache key names the view, the crop settings and the image id besides the
    image's own key: the crop is drawn from the id, and two ids may share one file (Flickr8k's training
    split holds two byte-identical photos) or one file two ids (another reader's numbering)."""

    def __init__(self, base: CaptionSource, view: int, augment: TrainAugment):
        if view < 1:
            raise ValueError(f"crop view {view}: expected 1..K (view 0 is the uncropped image)")
        super().__init__(base)
        self.view, self.augment = view, augment
        (lo, hi), (rlo, rhi) = augment.crop_scale, augment.crop_ratio
        self.mark = f"crop{view}:{lo!r}-{hi!r}:{rlo!r}-{rhi!r}"  # exact: other settings, other pixels

    def key(self, i: int, base_key: str) -> str:
        return f"{self.mark}:{self.base.image_id(i)!r}:{base_key}"

    def image(self, i: int) -> Image.Image:
        image = self.base.image(i)
        generator = torch.Generator().manual_seed(crop_seed(self.view, self.base.image_id(i)))
        return image.crop(self.augment.box(image.width, image.height, generator))
