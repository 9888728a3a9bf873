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

from support import TINY  # noqa: E402

# One thread per pytest-xdist worker (`make test` runs one per core), two in a plain serial run.
torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else 2)


def pytest_collection_modifyitems(config, items):
    """The tests marked slow first: run across workers (``--dist loadfile``), a long file started last
    would leave the other workers idle while it finishes. The sort is stable, so files keep their order."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture
def fake_slurm(tmp_path: Path, monkeypatch) -> Path:
    """SLURM_JOB_ID=4242 and an ``scontrol`` that logs its arguments and, once it has returned, sends SIGTERM
    to its caller, as SLURM ends a requeued job: under DDP to rank 0, which passes it on to the processes it
    launched, while they wait to be stopped (slurm_requeue.py)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "scontrol.log"
    bin_dir.mkdir()
    script = bin_dir / "scontrol"
    script.write_text(f'#!/bin/sh\necho "$@" >> {log}\n(sleep 0.5; kill -TERM $PPID) >/dev/null 2>&1 &\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    for name in ("SLURM_RESTART_COUNT", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    return log


@pytest.fixture
def tiny_overrides() -> list[str]:
    return list(TINY)


@pytest.fixture
def model_registry():
    """The closed registry of network classes, put back as it was when the test ends: a class the test
    registers (``@register``) is removed (``support.registry.restored_registry``)."""
    from support.registry import restored_registry

    with restored_registry():
        yield


@pytest.fixture(scope="session")
def make_checkpoint(tmp_path_factory):
    """The one checkpoint factory: ``make_checkpoint(name, words=None, extra=None) -> Path``.

    A tiny model BUILT (never trained: milliseconds) from the composed TINY config plus the ``extra``
    overrides (``["model/decoder=hard_gumbel"]``), with ``words`` as its vocabulary, saved as a well-formed
    captioning checkpoint (``support.corpus.write_checkpoint``) in a folder of its own. Train a model only
    where the test is about training."""
    from support.corpus import write_checkpoint

    def make(
        name: str = "model.ckpt", words: list[str] | None = None, extra: list[str] | None = None
    ) -> Path:
        return write_checkpoint(tmp_path_factory.mktemp("ckpt") / name, words, extra)

    return make


@pytest.fixture(scope="module")
def good_checkpoint(make_checkpoint) -> Path:
    """A tiny captioning checkpoint (``make_checkpoint``) to caption with and to break."""
    return make_checkpoint("good.ckpt")


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


@pytest.fixture(scope="module")
def bad(tmp_path_factory):
    """Broken image files (support.corpus.write_bad_images): name -> (path, the reason expected)."""
    from support.corpus import write_bad_images

    return write_bad_images(tmp_path_factory.mktemp("bad_images"))
