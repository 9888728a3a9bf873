"""Loading a trained captioner from a checkpoint alone, safely.

Checkpoints are read with ``torch.load(weights_only=True)``: only tensors and plain data, never code.
The network is rebuilt from the saved config, whose ``_target_`` entries must all be classes of this
package, so a crafted checkpoint cannot name an arbitrary callable either. The check resolves each target
and looks at where the class is *defined*: a dotted path such as ``captioning.train.os.system`` starts
with ``captioning.`` but resolves to ``os.system``, and is refused.
"""

from __future__ import annotations

import inspect
import pickle
import re
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


def _check_target(target: Any, path: Path, where: str) -> None:
    allowed = f"only classes defined under {ALLOWED_TARGET_PREFIX!r} may be built"
    refusal = f"{path}: {where}._target_ is {target!r}; {allowed}"
    if not str(target).startswith(ALLOWED_TARGET_PREFIX):
        raise CheckpointError(refusal)
    try:  # imports modules of this package only: the prefix was checked above
        obj = hydra.utils.get_object(str(target))
    except Exception as err:  # noqa: BLE001 - any failure to resolve is a broken checkpoint
        raise CheckpointError(f"{path}: {where}._target_ {target!r} does not name a class: {err}") from err
    if not (inspect.isclass(obj) and obj.__module__.startswith(ALLOWED_TARGET_PREFIX)):
        raise CheckpointError(f"{refusal} (it resolves to {obj!r})")


def _check_targets(node: Any, path: Path, where: str = "net_config") -> None:
    if isinstance(node, dict):
        target = node.get("_target_")
        if target is not None:
            _check_target(target, path, where)
        for key, value in node.items():
            _check_targets(value, path, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _check_targets(value, path, f"{where}[{i}]")


def _torch_load_reason(err: BaseException) -> str:
    """The informative part of a torch.load error, minus torch's advice to retry with weights_only=False."""
    text = str(err)
    if "WeightsUnpickler error:" in text:
        text = text.split("WeightsUnpickler error:", 1)[1].split("Check the documentation", 1)[0]
    return " ".join(text.split())[:300] or type(err).__name__


def read_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """``torch.load`` with weights_only=True, every failure turned into a CheckpointError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        # The weights-only unpickler names each callable it blocks as "GLOBAL module.name"; any other
        # unpickling failure means the bytes are not a torch checkpoint at all.
        blocked = re.search(r"GLOBAL ([\w.]+)", str(err))
        if blocked is None:
            reason = _torch_load_reason(err)
            raise CheckpointError(
                f"{path}: not a readable checkpoint (truncated or not a torch file?): {reason}"
            ) from err
        raise CheckpointError(
            f"{path}: refused to load: it contains objects other than tensors and plain data (it would call "
            f"{blocked.group(1)}). Checkpoints are read with weights_only=True so that loading one can never "
            "run code; this file was not written by captioning-train, or was tampered with."
        ) from err
    except (RuntimeError, EOFError, OSError, ValueError) as err:
        raise CheckpointError(
            f"{path}: not a readable checkpoint (truncated or not a torch file?): {_torch_load_reason(err)}"
        ) from err
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
