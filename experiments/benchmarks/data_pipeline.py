"""Input-pipeline rows of the benchmark (``scripts/bench.py --data-pipeline``): how fast the training input
path feeds a step, and how many DataLoader workers a GPU would need.

* **Images** (runs without a feature cache: fine-tuning every stage, augmentation): images/s of the
  datamodule's own training loader (``CaptionDataModule.train_dataloader``: ``RecordSource`` ->
  ``load_rgb`` JPEG decode -> ``image_to_tensor`` bicubic resize to S×S -> ``collate`` into batches of 64)
  with ``num_workers`` = 0, 1, 2, at S = 224 (the photo configs) and 96 (the synthetic-scene configs' size),
  on Flickr8k's photos (``$FLICKR8K_ROOT`` or ``data/flickr8k``, as ``paths.flickr8k``; the project machines' copy is 224×224)
  and on generated photo-sized (500×375) JPEGs. The one-off image check (``check_images``) is skipped: it
  is not part of an epoch. Files are read once first, so every row reads from the page cache.
* **Feature cache** (frozen-encoder runs): rows/s of ``CachedEncoder.lookup`` (what the LightningModule
  calls on every batch of ``image_keys``), batches of 64 random (49, 1280) float16 rows of a cache written
  by ``FeatureCache`` itself (an encoder stand-in of EfficientNet-Lite0's grid); cold (the file's pages
  dropped from the page cache first) and warm, and warm with 2 reader processes at once (2 DDP ranks
  reading disjoint halves of one memory-mapped file), plus the disk COCO's 123,287 images need.
* **Projection**: workers per GPU = (images per step / GPU step time) / (images/s of one worker).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import nn

from captioning.data.datamodule import CaptionDataModule
from captioning.data.features import CachedEncoder, FeatureCache, image_key
from captioning.data.readers import ImageRecord
from captioning.data.sources import CaptionSource, RecordSource
from experiments.benchmarks.timing import median

COCO_IMAGES = 123_287  # train2014 + val2014 (Karpathy's train + restval + val + test)
GRID, WIDTH = 49, 1280  # EfficientNet-Lite0's 7×7 grid of 1280 channels: the COCO recipe's cached features
STEP_SECONDS = 0.017  # GPU step, LSTMs at batch 64 on an H200: docs/guides/coco.md's ESTIMATE, not measured
PHOTO_SIZE = (500, 375)  # a typical Flickr8k photo (COCO's are larger: 640×480)
REPO = Path(__file__).resolve().parents[2]


def coco_cache_bytes(
    images: int = COCO_IMAGES, grid: int = GRID, width: int = WIDTH, itemsize: int = 2
) -> int:
    """Disk (and page cache) for ``images`` cached (grid, width) float16 grids: 123,287 × 49 × 1280 × 2."""
    return images * grid * width * itemsize


def workers_needed(images_per_step: int, step_seconds: float, images_per_second_per_worker: float) -> float:
    """DataLoader workers that keep a step fed: (images per step / step time) / (one worker's images/s)."""
    if step_seconds <= 0 or images_per_second_per_worker <= 0:
        raise ValueError("step_seconds and images_per_second_per_worker must be positive")
    return images_per_step / step_seconds / images_per_second_per_worker


# -- the folders of JPEGs ------------------------------------------------------------------------------
def generate_jpegs(folder: Path, n: int, size: tuple[int, int] = PHOTO_SIZE, seed: int = 0) -> list[Path]:
    """``n`` photo-like JPEGs (smooth colour fields plus grain, quality 90: ~65 KB at 500×375)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng, (w, h), paths = np.random.default_rng(seed), size, []
    for i in range(n):
        field = Image.fromarray((rng.random((6, 8, 3)) * 255).astype(np.uint8)).resize((w, h), Image.BICUBIC)
        pixels = np.asarray(field, dtype=np.float32) + rng.normal(0, 10, (h, w, 3))
        path = folder / f"photo_{i:05d}.jpg"
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(path, "JPEG", quality=90)
        paths.append(path)
    return paths


def flickr8k_photos(n: int, root: str | Path | None = None) -> list[Path]:
    """The first ``n`` photos of Flickr8k (``root``, ``$FLICKR8K_ROOT`` or ``data/flickr8k`` in the clone); [] if absent."""
    from captioning.data.readers import FLICKR8K_IMAGE_DIR, flickr8k_file

    for candidate in (root, os.environ.get("FLICKR8K_ROOT"), REPO / "data" / "flickr8k"):
        images = flickr8k_file(candidate, FLICKR8K_IMAGE_DIR) if candidate else None
        if images is not None and images.is_dir():  # in whichever layout the copy was unpacked
            return sorted(images.glob("*.jpg"))[:n]
    return []


def _warm_page_cache(paths: list[Path]) -> None:
    for path in paths:
        path.read_bytes()


# -- images through the datamodule's loader --------------------------------------------------------------
def loader_rate(
    paths: list[Path], image_size: int, workers: int, batch_size: int = 64, repeats: int = 2
) -> dict:
    """images/s of ``CaptionDataModule.train_dataloader`` over ``paths`` (one caption each, so one epoch
    decodes every file once): the median over ``repeats`` timed epochs, after one warm-up batch (worker
    start-up, persistent afterwards, is not counted). Also the shape of the last collated batch."""
    records = [ImageRecord(p.stem, p, ("a photo",)) for p in paths]
    source = RecordSource(records)
    dm = CaptionDataModule(
        source,
        source,
        image_size=image_size,
        batch_size=batch_size,
        num_workers=workers,
        max_caption_length=5,
    )
    dm._checked = True  # the one-off decode check of every image is not part of an epoch
    loader = dm.train_dataloader()
    for _ in loader:  # warm-up: workers started (persistent), first batch decoded
        break
    rates, shape = [], None
    for _ in range(repeats):
        start, count = time.perf_counter(), 0
        for batch in loader:
            count += batch["images"].shape[0]
            shape = tuple(batch["images"].shape)
        rates.append(count / (time.perf_counter() - start))
    del loader
    rate = median(rates)
    return {"images/s": rate, "seconds": batch_size / rate, "batch shape": list(shape), "images": len(paths)}


# -- the feature cache ----------------------------------------------------------------------------------
class _GridStandIn(nn.Module):
    """A frozen encoder with EfficientNet-Lite0's output shape: random (B, 49, 1280) grids."""

    grid_size, out_dim, mean, std = 7, WIDTH, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()), requires_grad=False)

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        return torch.randn(images.shape[0], GRID, WIDTH) * self.scale


class _Numbered(CaptionSource):
    """``n`` distinct 8×8 images (image i's pixels spell i), so each gets its own cache row."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def image(self, i: int) -> Image.Image:
        pixels = np.zeros((8, 8, 3), np.uint8)
        pixels[0, 0], pixels[0, 1], pixels[0, 2] = i % 256, (i // 256) % 256, i // 65536
        return Image.fromarray(pixels)

    def captions(self, i: int) -> tuple[str, ...]:
        return ("a scene",)

    def image_id(self, i: int) -> int:
        return i


def build_cache(directory: Path, rows: int) -> tuple[CachedEncoder, list[str]]:
    """A feature cache of ``rows`` (49, 1280) float16 grids written by ``FeatureCache``, and their keys."""
    source = _Numbered(rows)
    keys = [image_key(source, i) for i in range(rows)]
    encoder = CachedEncoder(FeatureCache(_GridStandIn(), directory, batch_size=64, progress=False), 8)
    encoder.add(source, keys)
    return encoder, keys


def _drop_from_page_cache(encoder: CachedEncoder) -> None:
    for name in encoder._chunks:
        fd = os.open(encoder.directory / name, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    encoder._maps.clear()


def _read_batches(encoder: CachedEncoder, keys: list[str], batch_size: int, seed: int) -> float:
    """Seconds to ``lookup`` every key once, in random batches of ``batch_size`` (a shuffled epoch)."""
    order = np.random.default_rng(seed).permutation(len(keys))
    start = time.perf_counter()
    for i in range(0, len(order), batch_size):
        features = encoder.lookup([keys[j] for j in order[i : i + batch_size]])
        assert features.shape[1:] == (GRID, WIDTH)
    return time.perf_counter() - start


def _reader(encoder: CachedEncoder, keys: list[str], batch_size: int, seed: int, barrier, out) -> None:
    encoder._maps.clear()  # each rank opens its own memory map, as a DDP rank does
    barrier.wait()  # both readers start together, after their process start-up
    out.put(_read_batches(encoder, keys, batch_size, seed))


def cache_rates(rows: int = 2048, batch_size: int = 64, directory: Path | None = None) -> list[dict]:
    """Rows/s of ``CachedEncoder.lookup``: cold, warm, and 2 concurrent readers (disjoint halves, warm)."""
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        encoder, keys = build_cache(Path(tmp), rows)
        out = []
        _drop_from_page_cache(encoder)
        for what, seed in (("cold: pages dropped first", 1), ("warm: in the page cache", 2)):
            seconds = _read_batches(encoder, keys, batch_size, seed)
            out.append(
                {"what": f"feature cache lookup, 1 reader, {what}", "readers": 1, "rows/s": rows / seconds}
            )
        ctx = mp.get_context("fork")  # the children inherit the encoder; they only read numpy maps
        queue, barrier = ctx.Queue(), ctx.Barrier(2)
        procs = [
            ctx.Process(target=_reader, args=(encoder, keys[r::2], batch_size, 3 + r, barrier, queue))
            for r in range(2)
        ]
        for p in procs:
            p.start()
        wall = max(queue.get(timeout=600) for _ in procs)  # both halves read: the slower reader's time
        for p in procs:
            p.join()
        out.append({"what": "feature cache lookup, 2 readers at once (DDP ranks), warm", "readers": 2,
                    "rows/s": rows / wall})  # fmt: skip
    for row in out:
        row.update({"decoder": "-", "images/s": row["rows/s"], "seconds": batch_size / row["rows/s"]})
        row["what"] += f" ({batch_size} random rows of ({GRID}, {WIDTH}) fp16 of {rows:,})"
    return out


# -- everything ---------------------------------------------------------------------------------------------
def bench_data_pipeline(
    images: int = 320,
    workers: tuple[int, ...] = (0, 1, 2),
    sizes: tuple[int, ...] = (224, 96),
    batch_size: int = 64,
    cache_rows: int = 2048,
    repeats: int = 2,
    flickr8k: bool = True,
    step_seconds: float = STEP_SECONDS,
    directory: Path | None = None,
) -> dict:
    """The rows (images through the loader, feature-cache reads) and the projection; see the module doc."""
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        folders = [(f"generated {PHOTO_SIZE[0]}x{PHOTO_SIZE[1]} JPEGs", generate_jpegs(Path(tmp), images))]
        photos = flickr8k_photos(images) if flickr8k else []
        if photos:
            w, h = Image.open(photos[0]).size
            folders.append((f"Flickr8k photos ({w}x{h} copy)", photos))
        for label, paths in folders:
            _warm_page_cache(paths)
            for size in sizes:
                for n in workers:
                    row = loader_rate(paths, size, n, batch_size, repeats)
                    what = f"input: {label} -> {size}px, batches of {batch_size}, num_workers={n}"
                    rows.append({"decoder": "-", "what": what, "source": label, "image_size": size,
                                 "workers": n, **row})  # fmt: skip
    if cache_rows:
        rows += cache_rates(cache_rows, batch_size, directory)
    return {"rows": rows, "projection": projection(rows, batch_size, step_seconds)}


def projection(rows: list[dict], images_per_step: int = 64, step_seconds: float = STEP_SECONDS) -> dict:
    """Workers per GPU for image-reading (fine-tuning) runs, from the one-worker rows at 224 px, and the
    share of the step the cache lookup takes for frozen-cache runs."""
    need = images_per_step / step_seconds
    out: dict = {
        "images_per_step": images_per_step,
        "gpu_step_seconds": step_seconds,
        "gpu_step_source": "ESTIMATE from docs/guides/coco.md (LSTMs, batch 64, H200), not measured",
        "images_per_second_needed": need,
        "coco_cache_bytes": coco_cache_bytes(),
        "gpu_jpeg_decode": "torchvision.io.decode_jpeg(device='cuda'): not measured: no GPU",
    }
    for row in rows:  # one worker's rate, IPC of the batches included; num_workers=0: decoding alone
        if row.get("workers") in (0, 1) and row.get("image_size") == 224:
            rate = "decode rate of num_workers=0" if row["workers"] == 0 else "rate of num_workers=1"
            key = f"workers per GPU, {row['source']}, {rate}"
            out[key] = workers_needed(images_per_step, step_seconds, row["images/s"])
    warm = [r for r in rows if r.get("readers") == 1 and "warm" in r["what"]]
    if warm:
        out["cache lookup ms per step (1 reader, warm)"] = 1e3 * images_per_step / warm[0]["rows/s"]
        out["cache lookup share of the GPU step"] = images_per_step / warm[0]["rows/s"] / step_seconds
    return out


def summary(result: dict) -> list[str]:
    """The projection as lines for the console."""
    p = result["projection"]
    lines = [
        f"a GPU step of {p['images_per_step']} images in {p['gpu_step_seconds'] * 1e3:.0f} ms "
        f"({p['gpu_step_source']}) needs {p['images_per_second_needed']:,.0f} images/s",
        f"COCO's {COCO_IMAGES:,} cached ({GRID}, {WIDTH}) fp16 grids: {p['coco_cache_bytes']:,} bytes "
        f"({p['coco_cache_bytes'] / 1e9:.1f} GB)",
    ]
    lines += [
        f"{k}: {v:.1f} (fine-tuning runs that read images)"
        for k, v in p.items()
        if k.startswith("workers per")
    ]
    if "cache lookup ms per step (1 reader, warm)" in p:
        lines.append(
            f"frozen-cache runs: lookup {p['cache lookup ms per step (1 reader, warm)']:.1f} ms per step "
            f"({p['cache lookup share of the GPU step']:.0%} of the GPU step), in the training process"
        )
    lines.append(p["gpu_jpeg_decode"])
    return lines
