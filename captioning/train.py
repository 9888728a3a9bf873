"""Hydra training entry point: ``captioning-train [overrides]`` or ``python -m captioning.train``.

Reads top to bottom: data -> model -> callbacks -> logger -> trainer -> fit -> test.
Ends by printing ``best checkpoint: PATH`` (scripts rely on that line).
"""

from __future__ import annotations

import os

# Offline-first: W&B online mode with no network blocks for ~100 s. Respect an explicit user choice.
os.environ.setdefault("WANDB_MODE", "offline")

import hydra  # noqa: E402
import pytorch_lightning as pl  # noqa: E402
from omegaconf import DictConfig, OmegaConf, open_dict  # noqa: E402

from captioning.lit_module import CaptionLitModule  # noqa: E402

CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")


def instantiate_dict(cfg: DictConfig | None) -> list:
    """Instantiate every entry of a ``name: {_target_: ...}`` mapping (callbacks, loggers)."""
    return [hydra.utils.instantiate(node) for node in (cfg or {}).values() if node is not None]


def train(cfg: DictConfig) -> str:
    pl.seed_everything(cfg.seed, workers=True)

    # Data first: the vocabulary fixes the decoder's output size.
    datamodule = hydra.utils.instantiate(cfg.data)
    vocab = datamodule.build_vocab()
    with open_dict(cfg):
        cfg.model.net.decoder.vocab_size = len(vocab)

    # The composed network config travels with the checkpoint (as YAML text: plain data, not code).
    net_yaml = OmegaConf.to_yaml(cfg.model.net, resolve=True)
    model: CaptionLitModule = hydra.utils.instantiate(
        cfg.model, vocab=vocab.to_dict(), net_config=net_yaml, _convert_="all"
    )

    callbacks = instantiate_dict(cfg.get("callbacks"))
    loggers = instantiate_dict(cfg.get("logger"))
    for logger in loggers:
        logger.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))
    trainer: pl.Trainer = hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False)

    trainer.fit(model, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    if cfg.get("run_test"):
        trainer.test(model, datamodule=datamodule, ckpt_path=best or None)
    return best


@hydra.main(config_path=CONFIG_DIR, config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> None:
    best = train(cfg)
    print(f"best checkpoint: {best}", flush=True)


if __name__ == "__main__":
    main()
