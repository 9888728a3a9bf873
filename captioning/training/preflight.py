"""Start-up checks that fail in seconds, before any data is read or training time is spent.

Reading the data (rendering scenes, parsing COCO annotations) takes seconds to minutes and only then fixes
the vocabulary size. The model's own constructors hold the real checks (encoder/decoder dimensions in
``CaptionModel``, ``beam_size >= 1`` in ``CaptionLitModule``, encoder weight files, ...), so the model is
built once with a placeholder vocabulary: every config error they catch surfaces immediately, in the
same words, instead of after the data. Unknown config groups or keys are already refused by Hydra.
"""

from __future__ import annotations

import torch
from omegaconf import DictConfig

from captioning.data.vocab import SPECIALS, Vocab
from captioning.errors import one_line
from captioning.training.build import build_model
from captioning.training.validate import ConfigError

PLACEHOLDER_WORDS = 4  # any size works: only the embedding and output layers depend on it


def check_model_config(cfg: DictConfig) -> None:
    """Build ``cfg.model`` with a placeholder vocabulary; raises whatever the constructors refuse."""
    vocab = Vocab([*SPECIALS, *(f"w{i}" for i in range(PLACEHOLDER_WORDS))])
    # Leave the global RNG as it was: the real model must be initialised exactly as without this check.
    with torch.random.fork_rng(devices=[]):
        try:
            build_model(cfg.model, vocab)  # built, checked, dropped
        except Exception as err:  # noqa: BLE001 - whatever a constructor refuses is a config error
            message = one_line(err)
            raise ConfigError(message if message.startswith("model:") else f"model: {message}") from err


def check_init_from(path: str | None) -> None:
    """The ``init_from`` file loads as a captioner (CheckpointError naming it otherwise), before the data
    are read: its fit with this run's vocabulary and network is checked when the weights are copied."""
    if path:
        from captioning.checkpoints.load import load_captioner

        load_captioner(path)
