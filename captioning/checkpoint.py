"""Loading a trained captioner from a checkpoint alone, safely.

Checkpoints are read with ``torch.load(weights_only=True)``: only tensors and plain data, never code.
The network is rebuilt from the saved config, whose ``_target_`` entries must all be classes of this
package, so a crafted checkpoint cannot name an arbitrary callable either.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from captioning.data.vocab import Vocab
from captioning.lit_module import CHECKPOINT_KEY
from captioning.models.captioner import Captioner

ALLOWED_TARGET_PREFIX = "captioning."


class CheckpointError(ValueError):
    """A file that cannot be used as a captioning checkpoint, with the path and the reason."""


@dataclass
class LoadedCaptioner:
    net: Captioner
    vocab: Vocab
    decoding: dict[str, Any]
    image_size: int
    path: Path


def _check_targets(node: Any, path: Path, where: str = "net_config") -> None:
    if isinstance(node, dict):
        target = node.get("_target_")
        if target is not None and not str(target).startswith(ALLOWED_TARGET_PREFIX):
            raise CheckpointError(
                f"{path}: {where}._target_ is {target!r}; only classes under {ALLOWED_TARGET_PREFIX!r} may be built"
            )
        for key, value in node.items():
            _check_targets(value, path, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _check_targets(value, path, f"{where}[{i}]")


def read_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """``torch.load`` with weights_only=True, every failure turned into a CheckpointError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        if "Unsupported global" not in str(err):  # not a refusal of code: the bytes are not a checkpoint
            raise CheckpointError(f"{path}: not a readable checkpoint (truncated or not a torch file?): {err}") from err
        raise CheckpointError(
            f"{path}: refused to load: it contains objects other than tensors and plain data "
            f"(loading is weights_only=True so that a checkpoint can never run code). Detail: {err}"
        ) from err
    except (RuntimeError, EOFError, OSError, ValueError) as err:
        raise CheckpointError(f"{path}: not a readable checkpoint (truncated or not a torch file?): {err}") from err
    if not isinstance(checkpoint, dict) or CHECKPOINT_KEY not in checkpoint or "state_dict" not in checkpoint:
        raise CheckpointError(
            f"{path}: not a captioning checkpoint (expected 'state_dict' and a '{CHECKPOINT_KEY}' entry "
            "with the vocabulary and network config, as written by captioning-train)"
        )
    return checkpoint


def load_captioner(path: str | Path, map_location: str | torch.device = "cpu") -> LoadedCaptioner:
    path = Path(path)
    checkpoint = read_checkpoint(path, map_location)
    meta = checkpoint[CHECKPOINT_KEY]
    try:
        vocab = Vocab.from_dict(meta["vocab"])
        net_config = OmegaConf.to_container(OmegaConf.create(meta["net_config"]), resolve=True)
        if not isinstance(net_config, dict):
            raise ValueError("net_config is not a mapping")
    except (KeyError, TypeError, ValueError, OmegaConfBaseException) as err:
        raise CheckpointError(f"{path}: the '{CHECKPOINT_KEY}' entry is incomplete: {err}") from err
    _check_targets(net_config, path)
    encoder_cfg = dict(net_config["encoder"])
    if "pretrained" in encoder_cfg:
        encoder_cfg["pretrained"] = False  # the trained weights come from the state dict below
    net: Captioner = hydra.utils.instantiate({**net_config, "encoder": encoder_cfg})
    if net.decoder.vocab_size != len(vocab):
        raise CheckpointError(
            f"{path}: the vocabulary has {len(vocab)} words but the decoder was built for {net.decoder.vocab_size}"
        )
    state = {k.removeprefix("net."): v for k, v in checkpoint["state_dict"].items() if k.startswith("net.")}
    try:
        net.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise CheckpointError(f"{path}: the weights do not fit the saved network config: {err}") from err
    net.eval()
    return LoadedCaptioner(
        net=net,
        vocab=vocab,
        decoding=dict(meta.get("decoding", {})),
        image_size=int(meta.get("image_size", 224)),
        path=path,
    )
