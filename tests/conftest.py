"""Shared fixtures: composed configs, a photo, references, and the one checkpoint factory. What the tests
share besides fixtures (paths, config options, helpers) is the ``support`` package."""

from __future__ import annotations

import os
from pathlib import Path

from captioning.runtime import configure_process

configure_process()  # as the entry points do, before torch is imported (captioning/runtime.py)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

# CONF, SHARED_DATA and compose_train: still imported from conftest by files not yet moved to support
from support import CONF, SHARED_DATA, TINY, compose_train  # noqa: E402, F401

torch.set_num_threads(2)


@pytest.fixture
def tiny_overrides() -> list[str]:
    return list(TINY)


@pytest.fixture(scope="module")
def good_checkpoint(tmp_path_factory) -> Path:
    """A tiny captioning checkpoint (``support.corpus.write_checkpoint``) to caption with and to break."""
    from support.corpus import write_checkpoint

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
