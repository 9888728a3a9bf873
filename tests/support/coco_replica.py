"""A miniature MS-COCO in the Karpathy split format, written by the tests themselves (no download).

``write_karpathy_replica(root)`` writes what ``data=karpathy`` reads (captioning/conf/data/karpathy.yaml):

    root/dataset_coco.json     {"images": [{"filepath", "filename", "split", "cocoid", "imgid", "sentids",
                                 "sentences": [{"tokens", "raw", "imgid", "sentid"}, ...]}, ...],
                                "dataset": "coco"}
    root/train2014/COCO_train2014_<12-digit id>.jpg    the train and restval images
    root/val2014/COCO_val2014_<12-digit id>.jpg        the val and test images (as in the real split)

Every image is a small JPEG drawn here (a coloured shape on a plain background), captioned by five
sentences that name the shape and colour, so a vocabulary with ``min_word_count`` up to 5 has real
words. ``RankProbe`` is a callback the multi-process tests add with ``+callbacks.rank_probe=...``: each
rank writes what it saw (global rank, world size, nodes, steps) to a JSON file.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
from PIL import Image, ImageDraw

SPLITS = {"train": 12, "restval": 4, "val": 4, "test": 4}  # 24 images, as in the real file's order
COLOURS = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (40, 70, 220), "yellow": (230, 210, 40)}
SHAPES = ("circle", "square", "triangle")
TEMPLATES = (
    "a {c} {s} on a white background",
    "A {c} {s} in the middle of the picture.",
    "there is a {c} {s}",
    "a picture of a single {c} {s}",
    "A {s} that is {c}",
)


def _draw(shape: str, colour: tuple[int, int, int], size: int, rng: np.random.Generator) -> Image.Image:
    image = Image.new("RGB", (size + 16, size), (245, 245, 240))  # not square, like COCO's photos
    draw = ImageDraw.Draw(image)
    r = size // 4 + int(rng.integers(0, size // 8))
    cx, cy = (size + 16) // 2 + int(rng.integers(-4, 5)), size // 2 + int(rng.integers(-4, 5))
    box = (cx - r, cy - r, cx + r, cy + r)
    if shape == "circle":
        draw.ellipse(box, fill=colour)
    elif shape == "square":
        draw.rectangle(box, fill=colour)
    else:
        draw.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=colour)
    return image


def write_karpathy_replica(root: str | Path, splits: dict[str, int] | None = None, size: int = 48) -> Path:
    """Write the replica under ``root`` (see the module docstring); returns the ``dataset_coco.json`` path."""
    root = Path(root)
    rng = np.random.default_rng(0)
    images, sentid = [], 0
    for split, count in (splits or SPLITS).items():
        folder = "train2014" if split in ("train", "restval") else "val2014"
        (root / folder).mkdir(parents=True, exist_ok=True)
        for _ in range(count):
            imgid = len(images)
            cocoid = 100_000 + 7 * imgid  # COCO ids are sparse, unrelated to the position in the file
            colour = list(COLOURS)[imgid % len(COLOURS)]
            shape = SHAPES[(imgid // len(COLOURS)) % len(SHAPES)]
            filename = f"COCO_{folder}_{cocoid:012d}.jpg"
            _draw(shape, COLOURS[colour], size, rng).save(root / folder / filename, quality=90)
            sentences = []
            for template in TEMPLATES:
                raw = template.format(c=colour, s=shape)
                tokens = raw.lower().rstrip(".").split()
                sentences.append({"tokens": tokens, "raw": raw, "imgid": imgid, "sentid": sentid})
                sentid += 1
            images.append(
                {
                    "filepath": folder,
                    "filename": filename,
                    "split": split,
                    "cocoid": cocoid,
                    "imgid": imgid,
                    "sentids": [s["sentid"] for s in sentences],
                    "sentences": sentences,
                }
            )
    path = root / "dataset_coco.json"
    path.write_text(json.dumps({"images": images, "dataset": "coco"}))
    return path


def replica_overrides(root: Path, cache: Path) -> list[str]:
    """Hydra overrides pointing data=karpathy at the replica (the same keys as $COCO_ROOT/$KARPATHY_JSON)."""
    return [f"paths.coco={root}", f"paths.karpathy_json={root / 'dataset_coco.json'}", f"paths.cache={cache}"]


class RankProbe(pl.Callback):
    """Writes ``out_dir/rank<global rank>.json`` at the end of fit: what this process saw of the job."""

    def __init__(self, out_dir: str):
        self.out_dir = Path(out_dir)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        import torch.distributed as dist

        seen = {
            "global_rank": trainer.global_rank,
            "local_rank": trainer.local_rank,
            "node_rank": trainer.node_rank,
            "world_size": trainer.world_size,
            "num_nodes": trainer.num_nodes,
            "dist_world_size": dist.get_world_size() if dist.is_initialized() else 1,
            "global_step": trainer.global_step,
        }
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / f"rank{trainer.global_rank}.json").write_text(json.dumps(seen))
