"""Cached grid features of a frozen encoder: every image is encoded once, then reused by every run.

With a frozen encoder (Xu et al. keep the CNN fixed) the grid a_i of an image never changes, yet a
training run would recompute it every epoch; on a CPU that is most of the step time. ``FeatureCache``
computes the (L, D) grid of every image once and keeps it on disk:

    cache_dir/<key>/index.json          image key -> [chunk, row, image id], the same rows by content
                                        (a hash of the file's bytes), plus the key's ingredients
    cache_dir/<key>/chunk-NNN.npy       (N, L, D) float16, read memory-mapped

``<key>`` hashes everything the features depend on: the encoder's class, module structure
(``repr``: every layer's shape and stride), grid size and output width, a hash of its state dict (weights
and BN statistics), the input image size and normalisation. Change any of them and a fresh directory is
used, so stale features are never read. Images are stored as float16 to halve disk and page cache
(Flickr8k at 14x14x112: 307 MB instead of 614 MB); the rounding error (relative 2^-11) is far below
what changes a caption. Chunks grow incrementally: images already cached (say the val split shared
by test, or a ``limit``-ed subset) are not recomputed.

A fine-tuned encoder (``fine_tune_from``: its last stages train) has a frozen prefix: the stages before
the first trained one. Their (C, h, w) activations never change either, so the cache stores those
instead (``encoder.encode_prefix``) and training runs only the trained suffix on them (a C != 3 channel
input to ``encoder.encode``). The key then also names the stage the prefix stops before, and the weights
hash covers the prefix's parameters and buffers only (the suffix changes as it trains); every other
ingredient is the same as for a whole frozen encoder, so does what invalidates it. The directory is
``<Encoder>-<S>px-before-<stage>-<hash>``. An encoder that trains every stage has nothing to cache.
"""

from __future__ import annotations

import copy
import fcntl
import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from captioning import progress
from captioning.data.files import write_text_atomically
from captioning.data.images import image_to_tensor
from captioning.data.readers import DatasetError
from captioning.data.sources import CaptionSource, RecordSource, SourceView
from captioning.hashing import encoder_identity, state_dict_hash, tensors_hash  # noqa: F401 - re-exported
from captioning.writes import commit, folder_problem

FORMAT_VERSION = 1  # bump when the layout or the way features are computed changes
STORAGE_DTYPE = np.float16


def image_key(source: CaptionSource, i: int) -> str:
    """What identifies image i's pixels: the file (path, size, mtime) on disk, else a hash of the pixels.

    Image ids alone are not enough: synthetic scenes of every split and seed are numbered 0..N-1.
    A file key costs a ``stat``, so a run looks up 100k images in a second; when it misses (the dataset
    was copied, moved or re-extracted: new paths or mtimes, same bytes) ``content_key`` finds the rows.
    A view's image (a mirrored or cropped training photo, ``SourceView``) has its original's key, marked.
    """
    if isinstance(source, SourceView):
        return source.key(i, image_key(source.base, i))
    if isinstance(source, RecordSource):
        path = Path(source.records[i].path).resolve()
        stat = path.stat()
        return f"file:{path}:{stat.st_size}:{stat.st_mtime_ns}"
    image = source.image(i)
    return f"pixels:{image.size}:{hashlib.sha1(image.tobytes()).hexdigest()}"


def content_key(source: CaptionSource, i: int) -> str:
    """What image i's features depend on, wherever its file lies: a hash of the file's bytes (a pixel
    key already is one). Read only for images whose ``image_key`` the cache does not know."""
    if isinstance(source, SourceView):
        return source.key(i, content_key(source.base, i))
    if isinstance(source, RecordSource):
        return f"bytes:{hashlib.sha1(Path(source.records[i].path).read_bytes()).hexdigest()}"
    return image_key(source, i)


class CachedFeatures:
    """``features(i)`` -> the (L, D) float32 grid of image i of one source (or its (C, h, w) prefix
    activations for a fine-tuned encoder), read from the memory maps.

    Picklable without its open maps, so DataLoader workers reopen the files instead of copying them.
    """

    def __init__(self, directory: Path, chunks: list[str], rows: list[tuple[int, int]]):
        self.directory, self.chunks = Path(directory), list(chunks)
        self.rows = np.asarray(rows, dtype=np.int64).reshape(-1, 2)  # (N, 2): chunk, row
        self._maps: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.rows)

    def __call__(self, i: int) -> Tensor:
        chunk, row = (int(v) for v in self.rows[i])
        if chunk not in self._maps:
            self._maps[chunk] = np.load(self.directory / self.chunks[chunk], mmap_mode="r")
        return torch.from_numpy(self._maps[chunk][row].astype(np.float32))  # (L, D) or (C, h, w)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_maps": {}}


class FeatureCache:
    """Encodes the images of a source once with a frozen ``encoder``, or the frozen prefix of a fine-tuned
    one (``prefix`` is then its ``cache_stop``, the index of the stage it stops before); see the module
    docstring."""

    def __init__(
        self,
        encoder: nn.Module | None = None,
        cache_dir: str | Path | None = None,
        batch_size: int = 32,
        device: str = "cpu",
        progress: bool = True,
    ):
        """``encoder`` None: the settings alone (a training config's ``data.feature_cache``), to be bound to
        the model's own encoder with ``bind`` (``CachedEncoder``)."""
        if cache_dir is None:
            raise ValueError("FeatureCache needs a cache_dir (data.feature_cache.cache_dir: ${paths.cache})")
        if batch_size <= 0:
            raise ValueError(f"FeatureCache batch_size must be positive, got {batch_size}")
        self.cache_dir = Path(cache_dir)
        self.batch_size, self.device, self.progress = batch_size, torch.device(device), progress
        self.prefix: int | None = None  # None: the whole encoder's grid is cached
        self.encoder: nn.Module | None = None
        if encoder is not None:
            self._bind(encoder)

    def bind(self, encoder: nn.Module) -> FeatureCache:
        """A cache with these settings for ``encoder`` (the model's own): its key is computed from it."""
        return FeatureCache(encoder, self.cache_dir, self.batch_size, str(self.device), self.progress)

    def _bind(self, encoder: nn.Module) -> None:
        if any(p.requires_grad for p in encoder.parameters()):
            stop = getattr(encoder, "cache_stop", 0)
            if not stop:
                raise ValueError(
                    f"FeatureCache needs a frozen encoder or a frozen prefix, but {type(encoder).__name__} "
                    "trains every stage: cached features would silently stop it from training. Use a frozen "
                    "encoder (model.encoder.freeze=true), fine-tune only its last stages "
                    "(model.encoder.fine_tune_from), or drop data.feature_cache"
                )
            if encoder.prefix_channels == 3:
                raise ValueError(
                    f"FeatureCache: the activations before {encoder.stage_names[stop]} have 3 channels, which "
                    "the encoder would take for images; fine-tune from another stage or drop data.feature_cache"
                )
            self.prefix = stop
        self.encoder = encoder  # its training mode and device are left as they are (see _encode_chunk)
        self.weights_hash = self._weights_hash(encoder)

    def _weights_hash(self, encoder: nn.Module) -> str:
        """SHA-256 of what the cached tensors depend on: the state dict, or the prefix's part of it."""
        return state_dict_hash(encoder) if self.prefix is None else tensors_hash(encoder.prefix_state_dict())

    @property
    def stops_before(self) -> str | None:
        """The stage name the cached prefix stops before (None: the whole encoder's grid is cached)."""
        return None if self.prefix is None else self.encoder.stage_names[self.prefix]

    # -- identity ----------------------------------------------------------------------------------
    def key_ingredients(self, image_size: int) -> dict:
        ingredients = {
            "format": FORMAT_VERSION,
            **encoder_identity(self.encoder, image_size, self.weights_hash),
            "dtype": np.dtype(STORAGE_DTYPE).name,
        }
        if self.prefix is not None:  # a whole frozen encoder's key stays as it was: existing caches match
            ingredients["stops_before"] = self.stops_before
            ingredients["prefix_channels"] = int(self.encoder.prefix_channels)
        return ingredients

    def directory(self, image_size: int) -> Path:
        """``cache_dir/<Encoder>-<S>px-<hash of the key's ingredients>``: readable, and unique per key."""
        ingredients = json.dumps(self.key_ingredients(image_size), sort_keys=True)
        digest = hashlib.sha256(ingredients.encode()).hexdigest()[:16]
        stop = "" if self.prefix is None else f"before-{self.stops_before}-"
        return self.cache_dir / f"{type(self.encoder).__name__}-{image_size}px-{stop}{digest}"

    # -- computing and reading ---------------------------------------------------------------------
    def features(
        self, source: CaptionSource, image_size: int, keys: list[str] | None = None
    ) -> CachedFeatures:
        """The cached features of every image of ``source``, encoding (and storing) the missing ones.
        ``keys``: the images' ``image_key``s when already known (computed here otherwise)."""
        if self.encoder is None:
            raise ValueError("FeatureCache.features: no encoder bound (FeatureCache.bind(encoder) first)")
        directory = self.directory(image_size)
        keys = [image_key(source, i) for i in range(len(source))] if keys is None else list(keys)
        problem = folder_problem(directory, keep=True)  # kept: other ranks may be about to lock in it
        if problem:  # a read-only cache serves what it holds; anything to add needs a writable folder
            index = _read_index(directory, self.key_ingredients(image_size))
            todo, _ = _resolve(index, source, keys)
            if directory.is_dir() and not todo:
                return CachedFeatures(
                    directory, index["chunks"], [tuple(index["images"][k][:2]) for k in keys]
                )
            lacking = f"{len(todo)} image(s) not in it, e.g. {next(iter(todo))}; " if todo else ""
            raise DatasetError(
                f"{self.cache_dir}: {lacking}cannot store the cached features there ({problem}); expected a "
                "writable folder (data.feature_cache.cache_dir: paths.cache, $CAPTIONING_CACHE)"
            )
        directory.mkdir(parents=True, exist_ok=True)
        with _locked(directory / ".lock"):  # concurrent runs (DDP ranks, sweeps) encode each image once
            index = _read_index(directory, self.key_ingredients(image_size))
            todo, aliased = _resolve(index, source, keys)
            if todo:
                self._encode_chunk(source, todo, directory, index, image_size)
            elif aliased:
                _write_json(directory / "index.json", index)
            rows = [tuple(index["images"][k][:2]) for k in keys]
        return CachedFeatures(directory, index["chunks"], rows)

    @torch.no_grad()
    def _encode_chunk(
        self,
        source: CaptionSource,
        todo: dict[str, tuple[int, str]],
        directory: Path,
        index: dict,
        image_size: int,
    ) -> None:
        """Encode images ``todo`` (key -> (index, content key)) into one new chunk, then record them in
        the index under both keys."""
        indices = [i for i, _ in todo.values()]
        chunk_id = len(index["chunks"])
        name = f"chunk-{chunk_id:03d}.npy"
        tmp = directory / f"{name}.partial"
        encoder = self.encoder  # the model's own encoder: encoded in eval mode and fp32, its state restored
        if not _on_device(encoder, self.device) or any(
            p.dtype != torch.float32 for p in encoder.parameters()
        ):
            # never move or cast the model's encoder: a copy on the cache's device, in float32 (a model that
            # trains in bf16-true / 16-true was converted before the cache is prepared)
            encoder = copy.deepcopy(encoder).to(self.device, torch.float32)
        was_training = encoder.training
        encoder.eval()
        try:
            self._encode_batches(source, indices, encoder, tmp, directory, image_size)
        finally:
            encoder.train(was_training)
        commit(tmp, directory / name)  # durable, complete chunks only: an interrupted run leaves a .partial
        index["chunks"].append(name)
        for row, (key, (i, content)) in enumerate(todo.items()):
            index["images"][key] = index["content"][content] = [chunk_id, row, source.image_id(i)]
        _write_json(directory / "index.json", index)

    def _encode_batches(
        self,
        source: CaptionSource,
        indices: list[int],
        encoder: nn.Module,
        tmp: Path,
        directory: Path,
        image_size: int,
    ) -> None:
        store = None
        # The CLIs' one progress report (a bar on a terminal, lines in a log, nothing with --quiet);
        # progress=False (tests, callers that report themselves) asks for nothing.
        bar = progress.bar(len(indices) if self.progress else 0, f"caching features in {directory.name}")
        for start in range(0, len(indices), self.batch_size):
            batch_idx = indices[start : start + self.batch_size]
            images = [image_to_tensor(source.image(i), image_size) for i in batch_idx]
            images = torch.stack(images)  # (B, 3, S, S)
            with torch.autocast(self.device.type, enabled=False):  # fp32 whatever the trainer's precision
                if self.prefix is None:
                    grid = encoder.encode(images.to(self.device))  # (B, L, D): CaptionModel.encode's path
                else:
                    grid = encoder.encode_prefix(images.to(self.device))  # (B, C, h, w): the frozen prefix
            if store is None:
                shape = (len(indices), *grid.shape[1:])
                store = np.lib.format.open_memmap(tmp, mode="w+", dtype=STORAGE_DTYPE, shape=shape)
            store[start : start + len(batch_idx)] = grid.float().cpu().numpy().astype(STORAGE_DTYPE)
            bar.update(len(batch_idx))
        bar.close()
        store.flush()
        del store


class CachedEncoder:
    """A model's frozen encoder (or the frozen prefix of a fine-tuned one) with its feature cache:
    ``lookup(keys)`` -> the cached (B, L, D) grids (or (B, C, h, w) prefix activations) of images by
    ``image_key``, which ``CaptionModel.encode_features`` finishes. Built from the model's own encoder
    (``FeatureCache.bind``), so the cache's key is computed from the weights that train and are saved:
    there is no second encoder to build or compare. ``add`` encodes a source's missing images first."""

    def __init__(self, cache: FeatureCache, image_size: int):
        if cache.encoder is None:
            raise ValueError("CachedEncoder needs a FeatureCache bound to the model's encoder")
        self.cache, self.image_size = cache, image_size
        self.prefix = cache.prefix  # None: whole grids; else the stage index the cached prefix stops before
        self.directory = cache.directory(image_size)
        self._chunks: list[str] = []
        self._rows: dict[str, tuple[int, int]] = {}  # image key -> (chunk, row)
        self._maps: dict[int, np.ndarray] = {}

    def add(self, source: CaptionSource, keys: list[str] | None = None) -> None:
        """Make the features of every image of ``source`` readable by key (encoding the missing ones)."""
        keys = [image_key(source, i) for i in range(len(source))] if keys is None else list(keys)
        stored = self.cache.features(source, self.image_size, keys)
        if len(stored.chunks) > len(self._chunks):  # chunks are only ever appended
            self._chunks = list(stored.chunks)
        for key, (chunk, row) in zip(keys, stored.rows.tolist()):
            self._rows[key] = (chunk, row)

    def __contains__(self, key: str) -> bool:
        return key in self._rows

    def lookup(self, keys: list[str]) -> Tensor:
        """(B, L, D) float32 grids (or (B, C, h, w) prefix activations) of the images ``keys``."""
        missing = [k for k in keys if k not in self._rows]
        if missing:
            raise KeyError(
                f"{len(missing)} image(s) not in the feature cache {self.directory}, e.g. {missing[0]}"
            )
        rows = []
        for key in keys:
            chunk, row = self._rows[key]
            if chunk not in self._maps:
                self._maps[chunk] = np.load(self.directory / self._chunks[chunk], mmap_mode="r")
            rows.append(self._maps[chunk][row].astype(np.float32))
        return torch.from_numpy(np.stack(rows))


def _on_device(module: nn.Module, device: torch.device) -> bool:
    """Whether ``module``'s parameters are on ``device`` ("cuda" meaning the current GPU)."""
    have = next(module.parameters()).device
    if have.type != device.type:
        return False
    if device.index is None and device.type == "cuda":
        return have.index == torch.cuda.current_device()
    return device.index is None or have.index == device.index


def _resolve(index: dict, source: CaptionSource, keys: list[str]) -> tuple[dict[str, tuple[int, str]], bool]:
    """The images of ``source`` the cache lacks (image key -> (first index with those pixels, content key)),
    and whether any image was found by content instead: such keys are added to ``index`` in place as
    aliases of the stored rows, so a copied or re-extracted dataset is not encoded a second time."""
    stored, by_content = index["images"], index["content"]
    todo: dict[str, tuple[int, str]] = {}
    aliased = False
    for i, key in enumerate(keys):
        if key in stored or key in todo:
            continue
        content = content_key(source, i)
        if content in by_content:
            stored[key] = by_content[content]
            aliased = True
        else:
            todo[key] = (i, content)
    return todo, aliased


def _read_index(directory: Path, ingredients: dict) -> dict:
    """``{"key": ingredients, "chunks": [names], "images": {image key: row}, "content": {content key: row}}``
    (a row is [chunk, row, image id]; indexes written before content keys existed get an empty map)."""
    path = directory / "index.json"
    if not path.is_file():
        return {"key": ingredients, "chunks": [], "images": {}, "content": {}}
    try:
        index = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(
            f"{path}: corrupt feature-cache index ({err}); delete {directory} to rebuild it"
        ) from err
    if index.get("key") != ingredients:
        raise ValueError(
            f"{path}: the cache directory's key does not match this encoder/image size (hash collision or "
            f"edited files); delete {directory} to rebuild it"
        )
    index.setdefault("content", {})
    return index


def _write_json(path: Path, data: dict) -> None:
    # Readers see the old or the new index, never half of one; after a crash, the chunks it names are on disk.
    write_text_atomically(path, json.dumps(data))


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
