"""Caption sources: indexable collections of (image, references), whatever the storage.

A source gives ``len``, ``image(i)`` (a PIL RGB image), ``captions(i)`` and ``image_id(i)``. The data
module builds the vocabulary and the train/val datasets on top of any of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from PIL import Image

from captioning.bounds import AtLeast, check_bounds
from captioning.data.extra_references import add_references
from captioning.data.images import load_rgb
from captioning.data.readers import (
    FLICKR8K_FOLDER,
    FLICKR8K_SPLIT_FILES,
    FLICKR8K_TEXT_DIRS,
    DatasetError,
    flickr8k_file,
    read_flickr8k,
)
from captioning.data.synthetic import Scene, SceneObject, render_scene, shuffled_captions

_SPLIT_STREAM = {"train": 0, "val": 1, "test": 2}


class CaptionSource:
    def __len__(self) -> int:
        raise NotImplementedError

    def image(self, i: int) -> Image.Image:
        raise NotImplementedError

    def captions(self, i: int) -> tuple[str, ...]:
        raise NotImplementedError

    def image_id(self, i: int) -> int | str:
        raise NotImplementedError

    def vocabulary_captions(self, i: int) -> tuple[str, ...]:
        """The captions of image i that the vocabulary is counted from: its references, except those a
        teacher added (``RecordSource(extra_references=...)``), which would only reorder it."""
        return self.captions(i)

    def scene(self, i: int) -> dict[str, Any] | None:
        """What image i shows, where the source knows it (synthetic scenes; validation scores it with
        captioning.metrics.scenes): ``{"image_size": (W, H), "objects": [{"shape", "color", "size",
        "position", "box"}, ...]}``, plain data that a batch can carry; ``None`` for photos."""
        return None


class SourceView(CaptionSource):
    """A split seen another way: its images changed (mirrored: ``captioning.data.mirror``; cropped:
    ``captioning.data.crop_views``), each view a source of its own, so it goes through every path a source
    goes through, the feature cache included. ``key`` marks the base image's cache key as the view's
    (``captioning.data.features.image_key``), so a view's features are computed once.
    Image ids are the base's (the same photo); a synthetic scene's description is not carried over
    (``scene`` is None: its boxes would not fit the changed image; only training splits have views)."""

    mark: str  # what distinguishes the view's pixels from its base's, in cache keys

    def __init__(self, base: CaptionSource):
        self.base = base

    def key(self, i: int, base_key: str) -> str:
        """Image i's cache key, from its base image's (a file or a content key): everything else the
        view's pixels depend on, marked before it."""
        return f"{self.mark}:{base_key}"

    def __len__(self) -> int:
        return len(self.base)

    def captions(self, i: int) -> tuple[str, ...]:
        return self.base.captions(i)

    def vocabulary_captions(self, i: int) -> tuple[str, ...]:
        return self.base.vocabulary_captions(i)  # the base's vocabulary: a view never adds a word

    def image_id(self, i: int) -> int | str:
        return self.base.image_id(i)


class SyntheticSource(CaptionSource):
    """``num_images`` synthetic scenes, rendered once into memory (96·96·3 bytes each).

    Scene i of split s is ``render_scene((seed, s, i))``: splits never share a scene stream, and a scene
    does not depend on how many others are drawn.
    """

    def __init__(
        self,
        num_images: Annotated[int, AtLeast(1)],
        seed: Annotated[int, AtLeast(0)] = 0,  # numpy's generators take no negative seeds
        split: str = "train",
        shuffle_object_order: bool = False,
    ):
        """``shuffle_object_order``: each reference lists the objects in a random order (seeded by the scene,
        see ``shuffled_captions``) instead of the templates' reading order; the images are the same."""
        check_bounds("", SyntheticSource, locals())  # the bounds in the signature above
        if seed >= 2**63:
            raise ValueError(f"seed={seed}: expected an integer below 2**63 (numpy's seeds)")
        if split not in _SPLIT_STREAM:
            raise ValueError(f"split must be one of {sorted(_SPLIT_STREAM)}, got {split!r}")
        keys = [(seed, _SPLIT_STREAM[split], i) for i in range(num_images)]  # scene i's seed
        self.scenes: list[Scene] = [render_scene(key) for key in keys]
        if shuffle_object_order:  # each scene's order drawn from its own seed: independent of num_images
            self.scenes = [
                replace(s, captions=shuffled_captions(s.objects, np.random.default_rng((*key, 1))))
                for key, s in zip(keys, self.scenes)
            ]

    def __len__(self) -> int:
        return len(self.scenes)

    def image(self, i: int) -> Image.Image:
        return Image.fromarray(self.scenes[i].image)

    def captions(self, i: int) -> tuple[str, ...]:
        return self.scenes[i].captions

    def image_id(self, i: int) -> int:
        return i

    def objects(self, i: int) -> tuple[SceneObject, ...]:
        return self.scenes[i].objects

    def scene(self, i: int) -> dict[str, Any]:
        scene = self.scenes[i]
        height, width = scene.image.shape[:2]  # boxes are in pixels of this canvas
        return {"image_size": (width, height), "objects": [asdict(o) for o in scene.objects]}


class RecordSource(CaptionSource):
    """Images on disk described by reader records (COCO, Karpathy split, Flickr8k, your own files).

    ``num_images``: only the first that many records (None: all), the knob every source shares, so that
    ``data.train.num_images=24`` (and ``debug=tiny``) shrinks any data set, photos or synthetic scenes.
    ``extra_references``: a COCO results file of these images whose captions join their references,
    ``extra_copies`` times each (a teacher distilled into the student: ``captioning.data.extra_references``;
    ``++data.train.extra_references=teacher.json``)."""

    def __init__(
        self,
        records: Sequence,
        num_images: Annotated[int, AtLeast(1)] | None = None,
        extra_references: str | None = None,
        extra_copies: Annotated[int, AtLeast(1)] = 1,
    ):
        check_bounds("", RecordSource, locals())  # the bounds in the signature above
        if extra_references is not None:  # before num_images: the file describes the whole split
            records = add_references(records, extra_references, extra_copies)
        self.records = list(records)[:num_images]
        if not self.records:
            raise ValueError("the data set is empty: the reader returned no records")

    def __len__(self) -> int:
        return len(self.records)

    def image(self, i: int) -> Image.Image:
        return load_rgb(self.records[i].path)

    def captions(self, i: int) -> tuple[str, ...]:
        return tuple(self.records[i].captions) + tuple(self.records[i].extra_captions)

    def vocabulary_captions(self, i: int) -> tuple[str, ...]:
        return tuple(self.records[i].captions)

    def image_id(self, i: int) -> int | str:
        return self.records[i].image_id


class MissingSplit(CaptionSource):
    """A split the data set does not have: any use raises one DatasetError saying why and what exists.

    Configs name it instead of aliasing another split, so that ``split=test`` can never score the dev
    images under the label ``test``. ``num_images`` is accepted (and unused: there are none) so that
    ``data.test.num_images=8`` shrinks every data config alike."""

    def __init__(self, reason: str, num_images: int | None = None):
        self.reason = reason

    def _refuse(self, *args):
        raise DatasetError(self.reason)

    __len__ = image = captions = image_id = _refuse


def flickr8k_split(root: str, split: str, num_images: int | None = None) -> CaptionSource:
    """Flickr8k's ``split`` (its first ``num_images``) when its split list is in ``root``, else a
    :class:`MissingSplit` naming the split lists found (the test list is not part of every copy:
    the project machines' has train and dev)."""
    folder = Path(root).expanduser()
    path = flickr8k_file(folder, FLICKR8K_SPLIT_FILES[split])
    if path.is_file():
        return RecordSource(read_flickr8k(folder, split), num_images)
    if not folder.is_dir():  # no copy at all: say which key points at it
        return MissingSplit(f"{folder.resolve()}: not found; expected {FLICKR8K_FOLDER}")
    found = sorted(
        str(p.relative_to(folder))
        for d in FLICKR8K_TEXT_DIRS
        for p in (folder / d).glob("Flickr_8k.*Images.txt")
    )
    return MissingSplit(
        f"{path}: not found, so this Flickr8k copy has no {split!r} split (split lists found: "
        f"{', '.join(found) or 'none'}); evaluate split=val, or add {path.name} and its images"
    )
