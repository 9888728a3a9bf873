"""What the tests share besides fixtures: the repository's paths, the config options, composing a config.

Modules: ``support.helpers`` (decoders and nets from the composed configs),
``support.corpus`` (the bad-input corpus and the one way to build a tiny checkpoint), ``support.hostile``
(one-line stderr checks, broken checkpoints), ``support.coco_replica`` (a miniature MS-COCO),
``support.registry`` (the model registry put back after a test registers a class), ``support.preempt`` (a
signal at a step, and each step's batch, in a run of another process). The fixtures
are in ``tests/conftest.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

from hydra import compose, initialize_config_dir

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "captioning" / "conf"
SHARED_DATA = REPO.parent / "shared" / "data"  # the project machines' copy of the data sets, beside the clone


def _flickr8k() -> Path:
    """Where the Flickr8k tests find the data: FLICKR8K_ROOT when set (as ``paths.flickr8k`` does), else the
    config's default ``data/flickr8k`` in the clone, else the project machines' ``../shared/data/flickr8k``.
    The tests that need it skip when none has ``Flickr8k.token.txt``."""
    if os.environ.get("FLICKR8K_ROOT"):
        return Path(os.environ["FLICKR8K_ROOT"])
    candidates = (REPO / "data" / "flickr8k", SHARED_DATA / "flickr8k")
    return next((c for c in candidates if (c / "Flickr8k.token.txt").is_file()), candidates[0])


FLICKR8K = _flickr8k()
HAS_FLICKR8K = (FLICKR8K / "Flickr8k.token.txt").is_file()

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
