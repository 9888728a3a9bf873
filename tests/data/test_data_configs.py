"""Every ``captioning/conf/data/*.yaml`` read from a small fixture folder the test writes (no ../shared data),
as composed and under ``debug=tiny``, and trained one ``fast_dev_run`` step under ``debug=tiny``.

A new data config is picked up by itself and fails here, naming itself, until ``FIXTURES`` has a writer
that lays its files out (a few lines: the images are shared).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hydra.utils import instantiate
from PIL import Image

from captioning.data.records import DatasetError
from captioning.data.sources import MissingSplit, RecordSource

from support import CONF, compose_train

SIZES = {"train": 30, "val": 10, "test": 10}  # debug=tiny keeps 24, 8, 8
TINY_SIZES = {"train": 24, "val": 8, "test": 8}
COLOURS = {"red": (220, 40, 40), "green": (40, 200, 60), "blue": (50, 80, 230)}


def captions_of(split: str, i: int) -> tuple[str, str]:
    colour = list(COLOURS)[i % 3]
    return f"A {colour} square, {split} picture {i}.", f"a {colour} block"


def write_images(folder: Path, split: str, names: Callable[[int], str] | None = None) -> list[str]:
    """SIZES[split] 16x16 one-colour images under ``folder``; returns their file names (relative)."""
    files = []
    for i in range(SIZES[split]):
        name = names(i) if names else f"{split}_{i:02d}.png"
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (16, 16), list(COLOURS.values())[i % 3]).save(folder / name)
        files.append(name)
    return files


def coco_json(path: Path, split: str, files: list[str]) -> None:
    images = [{"id": 100 + i, "file_name": f} for i, f in enumerate(files)]
    anns = [
        {"id": 10 * i + k, "image_id": 100 + i, "caption": c}
        for i in range(len(files))
        for k, c in enumerate(captions_of(split, i))
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"images": images, "annotations": anns}), encoding="utf-8")


def fixture_coco(root: Path) -> list[str]:
    for split, folder in (("train", "train2014"), ("val", "val2014")):
        files = write_images(root / folder, split)
        coco_json(root / "annotations" / f"captions_{folder}.json", split, files)
    return [f"paths.coco={root}"]


def fixture_karpathy(root: Path) -> list[str]:
    images = []
    for split in SIZES:
        files = write_images(root / "photos", split)
        for i, f in enumerate(files):
            sentences = [{"raw": c} for c in captions_of(split, i)]
            images.append(
                {
                    "filepath": "photos",
                    "filename": f,
                    "split": split,
                    "imgid": len(images),
                    "sentences": sentences,
                }
            )
    (root / "dataset_coco.json").write_text(json.dumps({"images": images}), encoding="utf-8")
    return [f"paths.coco={root}", f"paths.karpathy_json={root / 'dataset_coco.json'}"]


def fixture_flickr8k(root: Path) -> list[str]:
    lines = []
    lists = {"train": "trainImages", "val": "devImages", "test": "testImages"}
    for split, listing in lists.items():
        files = write_images(root / "Flicker8k_Dataset", split, lambda i, s=split: f"{s}_{i:02d}.jpg")
        (root / f"Flickr_8k.{listing}.txt").write_text("\n".join(files) + "\n", encoding="utf-8")
        lines += [f"{f}#{k}\t{c}" for i, f in enumerate(files) for k, c in enumerate(captions_of(split, i))]
    (root / "Flickr8k.token.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [f"paths.flickr8k={root}"]


def fixture_captions_json(root: Path) -> list[str]:
    for split in ("train", "val"):
        coco_json(root / f"{split}.json", split, write_images(root / "images", split))
    return [f"paths.train_json={root / 'train.json'}", f"paths.val_json={root / 'val.json'}", f"paths.images={root / 'images'}"]  # fmt: skip


def own_file(path: Path, split: str, image_root: Path) -> Path:
    """``path`` (.csv, .jsonl or .json) with the captions of ``split``, its images (in sub-folders) under
    ``image_root``."""
    files = write_images(image_root, split, lambda i: f"{split}/{list(COLOURS)[i % 3]}/{i:02d}.png")
    rows = [(f, c) for i, f in enumerate(files) for c in captions_of(split, i)]
    if path.suffix == ".csv":
        with path.open("w", newline="", encoding="utf-8") as out:
            csv.writer(out).writerows([("image", "caption"), *rows])
    elif path.suffix == ".jsonl":  # both spellings: all of an image's captions in a list, one caption a line
        lines = [
            json.dumps({"image": f, "captions": list(captions_of(split, i))}) for i, f in enumerate(files[:5])
        ]
        lines += [json.dumps({"image": f, "caption": c}) for f, c in rows[10:]]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    else:
        coco_json(path, split, files)
    return path


def fixture_own(suffix: str) -> Callable[[Path], list[str]]:
    def write(root: Path) -> list[str]:
        if suffix == "folder":  # a folder per split: its images and a captions.csv
            for split in ("train", "val"):
                (root / split).mkdir(parents=True)
                own_file(root / split / "captions.csv", split, root / split)
            return [f"paths.train_captions={root / 'train'}", f"paths.val_captions={root / 'val'}"]
        root.mkdir(parents=True)
        paths = [own_file(root / f"{split}{suffix}", split, root / "images") for split in ("train", "val")]
        return [f"paths.train_captions={paths[0]}", f"paths.val_captions={paths[1]}", f"paths.images={root / 'images'}"]  # fmt: skip

    return write


def fixture_synthetic(root: Path) -> list[str]:
    return []  # no files: the scenes are drawn from the seeds


FIXTURES: dict[str, Callable[[Path], list[str]]] = {
    "coco": fixture_coco,
    "karpathy": fixture_karpathy,
    "flickr8k": fixture_flickr8k,
    "captions_json": fixture_captions_json,
    "own": fixture_own(".csv"),
    "own-jsonl": fixture_own(".jsonl"),
    "own-json": fixture_own(".json"),
    "own-folder": fixture_own("folder"),
    "synthetic": fixture_synthetic,
}
DATA_CONFIGS = sorted(p.stem for p in (CONF / "data").glob("*.yaml"))
CASES = DATA_CONFIGS + sorted(k for k in FIXTURES if k not in DATA_CONFIGS)  # own-*: data=own's other formats
NO_TEST_SPLIT = ("coco", "captions_json", "own")  # test: a MissingSplit saying why


def compose(case: str, tmp_path: Path, extra: list[str]):
    assert case in FIXTURES, f"captioning/conf/data/{case}.yaml has no fixture in {__file__} (FIXTURES)"
    overrides = FIXTURES[case](tmp_path / "data")
    if case == "synthetic" and "debug=tiny" not in extra:  # SIZES' scenes, not 6,000
        overrides += [f"data.{split}.num_images={n}" for split, n in SIZES.items()]
    return compose_train([f"data={case.split('-')[0]}", *overrides, f"paths.cache={tmp_path / 'cache'}", *extra], tmp_path)  # fmt: skip


def check_split(source, split: str, sizes: dict[str, int], case: str) -> None:
    if split == "test" and case.split("-")[0] in NO_TEST_SPLIT:
        assert isinstance(source, MissingSplit)
        with pytest.raises(DatasetError, match="evaluate split=val"):
            len(source)
        return
    assert len(source) == sizes[split]
    if isinstance(source, RecordSource):  # the files' captions, in order, for the first image
        assert source.captions(0) == captions_of(split, 0)
        image = source.image(0)
        assert image.size == (16, 16)
        assert all(abs(a - b) <= 8 for a, b in zip(image.getpixel((8, 8)), COLOURS["red"]))  # JPEG: about


@pytest.mark.parametrize("case", CASES)
def test_every_data_config_reads_its_fixture(case: str, tmp_path: Path) -> None:
    dm = instantiate(compose(case, tmp_path, []).data)
    for split in ("train", "val", "test"):
        check_split(dm.sources[split], split, SIZES, case)
    vocab = dm.build_vocab()
    if case != "synthetic":
        assert all(w in vocab.stoi for w in ("square", "picture", "red", "block"))


@pytest.mark.parametrize("case", CASES)
def test_debug_tiny_shrinks_every_data_config_and_trains_a_step(case: str, tmp_path: Path) -> None:
    from captioning.training.train import train

    cfg = compose(case, tmp_path, ["debug=tiny", "+trainer.fast_dev_run=true", "data.image_size=32"])
    dm = instantiate(cfg.data)
    for split in ("train", "val", "test"):
        check_split(dm.sources[split], split, TINY_SIZES, case)
    batch = next(iter(dm.train_dataloader()))
    assert batch["images"].shape == (8, 3, 32, 32)  # debug=tiny's batch_size, the images resized
    train(cfg)  # one train and one val batch through the real config (fast_dev_run writes no checkpoint)
    assert cfg.model.decoder.vocab_size == len(dm.build_vocab())


@pytest.mark.parametrize("case", CASES)
def test_debug_tiny_cached_keeps_the_data_the_run_names(case: str, tmp_path: Path) -> None:
    """It replaced any data with synthetic scenes (`override /data: synthetic`): a run on one's own cached
    data trained on scenes and said nothing."""
    plain = compose(case, tmp_path / "plain", []).data
    tiny = compose(case, tmp_path / "tiny", ["debug=tiny_cached"]).data
    assert tiny.train._target_ == plain.train._target_
    if case != "synthetic":  # compose() gives the scenes its own sizes on the command line
        assert tiny.train.num_images == 24  # shrunk, as debug=tiny does
