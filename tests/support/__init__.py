"""What the tests share besides fixtures: the repository's paths, the config options, composing a config.

Modules: ``support.helpers`` (decoders and nets from the composed configs),
``support.corpus`` (the bad-input corpus and the one way to build a tiny checkpoint), ``support.hostile``
(one-line stderr checks, broken checkpoints), ``support.coco_replica`` (a miniature MS-COCO). The fixtures
are in ``tests/conftest.py``.
"""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir

REPO = Path(__file__).resolve().parents[2]
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
