"""Shared fixtures: composed configs, tiny models and a tiny trained-for-a-few-steps checkpoint."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts OpenMP: see captioning/__init__.py
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from captioning.runtime import keep_freed_memory  # noqa: E402

torch.set_num_threads(2)
keep_freed_memory()  # as the entry points do (captioning/runtime.py)

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
SHARED_DATA = REPO.parent / "shared" / "data"

DECODERS = sorted(p.stem for p in (CONF / "model" / "decoder").glob("*.yaml"))
ATTENTIONS = sorted(p.stem for p in (CONF / "model" / "decoder" / "attention").glob("*.yaml"))

# Small enough that a Lightning run of a few steps takes seconds on 2 CPU cores.
TINY_DATA = [
    "data.train.num_images=24",
    "data.val.num_images=8",
    "data.test.num_images=8",
    "data.batch_size=8",
    "data.eval_batch_size=8",
]
TINY_DECODER = [
    "model.decoder.embed_dim=16",
    "model.decoder.hidden_dim=16",
    "model.max_length=6",
    "logger=[]",
    "~callbacks.lr_monitor",
]
TINY = [
    *TINY_DATA,
    "model.encoder.out_dim=16",
    "model.encoder.width=8",
    "model.encoder.grid_size=3",
    *TINY_DECODER,
]


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
