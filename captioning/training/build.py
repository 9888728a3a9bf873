"""Building the model from a composed config: the one sequence behind training, the start-up check,
the tests and the bench (vocabulary size in, network config saved as YAML, LightningModule out)."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig, OmegaConf

from captioning.data.vocab import Vocab
from captioning.errors import ConfigError
from captioning.models.registry import with_defaults
from captioning.models.size import size_problem
from captioning.training.lit_module import CaptionLitModule


def net_config(model_cfg: DictConfig, vocab_size: int) -> DictConfig:
    """The CaptionModel's config (encoder + decoder with its vocabulary size), as saved in checkpoints:
    every constructor argument of every part, the ones the config left to their defaults included."""
    decoder = OmegaConf.to_container(model_cfg.decoder, resolve=True)
    decoder["vocab_size"] = vocab_size
    tree = {
        "_target_": "captioning.models.caption_model.CaptionModel",
        "encoder": OmegaConf.to_container(model_cfg.encoder, resolve=True),
        "decoder": decoder,
    }
    return OmegaConf.create(with_defaults(tree))  # every constructor argument stated, defaults included


def build_net(model_cfg: DictConfig, vocab_size: int):
    """The bare CaptionModel (encoder + decoder) of ``model_cfg`` for a vocabulary of ``vocab_size`` words."""
    return hydra.utils.instantiate(net_config(model_cfg, vocab_size))


def build_model(model_cfg: DictConfig, vocab: Vocab) -> CaptionLitModule:
    """The CaptionLitModule of ``model_cfg`` (``cfg.model``) for ``vocab``; its network config travels
    with every checkpoint as YAML text (plain data, not code)."""
    net = net_config(model_cfg, len(vocab))
    image_size = model_cfg.get("image_size")
    too_large = size_problem(OmegaConf.to_container(net), image_size if isinstance(image_size, int) else None)
    if too_large:  # counted on the meta device: refused before gigabytes are allocated
        raise ConfigError(f"model: {too_large}")
    net_yaml = OmegaConf.to_yaml(net)
    model_dict = OmegaConf.to_container(model_cfg, resolve=True)
    model_dict["decoder"]["vocab_size"] = len(vocab)
    return hydra.utils.instantiate(model_dict, vocab=vocab.to_dict(), net_config=net_yaml, _convert_="all")
