"""Shared fixtures: composed configs, tiny models and a tiny trained-for-a-few-steps checkpoint."""

from __future__ import annotations

import os
from pathlib import Path

from captioning.runtime import configure_process

configure_process()  # as the entry points do, before torch is imported (captioning/runtime.py)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

torch.set_num_threads(2)

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "captioning" / "conf"
SHARED_DATA = REPO.parent / "shared" / "data"

DECODERS = sorted(p.stem for p in (CONF / "model" / "decoder").glob("*.yaml"))
ATTENTIONS = sorted(p.stem for p in (CONF / "model" / "decoder" / "attention").glob("*.yaml"))

# captioning/conf/debug/tiny.yaml: small enough that a Lightning run of a few steps takes seconds on 2 CPU cores.
TINY = ["debug=tiny"]


def compose_train(overrides: list[str], tmp_path: Path | None = None):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides, return_hydra_config=False)
    if tmp_path is not None:
        from omegaconf import open_dict

        with open_dict(cfg):
            cfg.output_dir = str(tmp_path)
    return cfg


@pytest.fixture
def tiny_overrides() -> list[str]:
    return list(TINY)


@pytest.fixture(scope="module")
def good_checkpoint(tmp_path_factory) -> Path:
    """A tiny captioning checkpoint (``corpus.write_checkpoint``) to caption with and to break."""
    from corpus import write_checkpoint

    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "good.ckpt")


@pytest.fixture
def photo(tmp_path: Path) -> Path:
    import numpy as np
    from PIL import Image

    path = tmp_path / "photo.png"
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (40, 56, 3), dtype=np.uint8)).save(path)
    return path


@pytest.fixture
def references(tmp_path: Path) -> Path:
    """A COCO references file of two images (ids 1 and 2)."""
    import json

    refs = {
        "images": [{"id": 1}, {"id": 2}],
        "annotations": [
            {"id": 10, "image_id": 1, "caption": "a red circle"},
            {"id": 11, "image_id": 2, "caption": "a blue square"},
        ],
    }
    path = tmp_path / "refs.json"
    path.write_text(json.dumps(refs))
    return path
