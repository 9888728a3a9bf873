"""The closed name -> class map from which checkpoints are rebuilt (as litgpt rebuilds its models).

A checkpoint's network config names its classes by ``_target_``; only the names below are built, each
exactly the class it names, so a crafted checkpoint can neither call an arbitrary callable nor build a
library object that is not a network part (a data source, a scorer). A new model part is registered
here, and ``tests/checkpoints/test_checkpoints.py`` checks that every config of ``captioning/conf/model/`` uses registered names.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from captioning.bounds import (  # noqa: F401 - SIZE_BOUNDS: the loader reads the bounds from here too
    MAX_ACTIVATION,
    MAX_PARAMETERS,
    MAX_WIDTH,
    MAY_BE_ZERO,
    SIZE_BOUNDS,
)
from captioning.models.attention.dot import DotAttention, ScaledDotAttention
from captioning.models.attention.gumbel import GumbelHardAttention
from captioning.models.attention.multihead import MultiHeadAttention
from captioning.models.attention.reinforce import ReinforceHardAttention
from captioning.models.attention.soft import AdditiveAttention
from captioning.models.caption_model import CaptionModel
from captioning.models.decoders.lstm import LSTMDecoder
from captioning.models.decoders.transformer import TransformerDecoder
from captioning.models.encoders import EfficientNetLiteEncoder, SmallCNN, TorchvisionEncoder

MODEL_CLASSES: dict[str, type] = {
    f"{cls.__module__}.{cls.__qualname__}": cls
    for cls in (
        CaptionModel,
        SmallCNN,
        TorchvisionEncoder,
        EfficientNetLiteEncoder,
        LSTMDecoder,
        TransformerDecoder,
        AdditiveAttention,
        DotAttention,
        ScaledDotAttention,
        MultiHeadAttention,
        ReinforceHardAttention,
        GumbelHardAttention,
    )
}

# Names that checkpoints of earlier versions carry, and the class they now mean.
LEGACY_TARGETS: dict[str, str] = {
    "captioning.models.captioner.Captioner": "captioning.models.caption_model.CaptionModel",
    # models/captioner.py became models/caption_model.py (inference/captioner.py is the user-facing Captioner).
    "captioning.models.captioner.CaptionModel": "captioning.models.caption_model.CaptionModel",
    # Lite0-only before Lite1/2 (the same modules and defaults: variant lite0).
    "captioning.models.encoders.EfficientNetLite0Encoder": "captioning.models.encoders.EfficientNetLiteEncoder",
    # Both hard-attention layers lived in attention/hard.py before each got its own module.
    "captioning.models.attention.hard.ReinforceHardAttention": "captioning.models.attention.reinforce.ReinforceHardAttention",
    "captioning.models.attention.hard.GumbelHardAttention": "captioning.models.attention.gumbel.GumbelHardAttention",
}


# Keys that checkpoints of earlier versions carry, per class, and what they are now called.
LEGACY_KEYS: dict[str, dict[str, str]] = {
    # The Transformer's feed-forward width was "hidden_dim", the LSTM's state width's name (0.3: ff_dim).
    "captioning.models.decoders.transformer.TransformerDecoder": {"hidden_dim": "ff_dim"},
}


def canonical_name(target: str) -> str | None:
    """The registered name ``target`` stands for (itself, or what a legacy name became); None if neither."""
    target = LEGACY_TARGETS.get(target, target)
    return target if target in MODEL_CLASSES else None


def modernise_config(node: Any) -> None:
    """Today's class names and keys in a saved network config, in place: every ``_target_`` that
    ``LEGACY_TARGETS`` knows, and the keys of ``LEGACY_KEYS`` (a node that already has the new key keeps
    it; the old one is dropped). Unknown targets are left for the caller to refuse."""
    if isinstance(node, dict):
        if "_target_" in node:
            target = canonical_name(str(node["_target_"]))
            node["_target_"] = target or node["_target_"]
            for old, new in LEGACY_KEYS.get(target or "", {}).items():
                if old in node:
                    node.setdefault(new, node.pop(old))
        for value in node.values():
            modernise_config(value)
    elif isinstance(node, list):
        for value in node:
            modernise_config(value)


def is_size_key(key: str) -> bool:
    """Keys whose integer is a size that memory grows with (widths, counts, grid and vocabulary sizes);
    an index such as the Transformer's ``attention_layer=-1`` is not one."""
    return key in SIZE_BOUNDS or key.endswith(("_dim", "_size")) or key.startswith("num_") or key == "width"


def bad_sizes(
    node: Any, where: str, low: int = 1, skip: tuple[str, ...] = ()
) -> Iterator[tuple[str, Any, int, int]]:
    """(key path, value, lowest, highest) for every size of a network config outside its range.

    ``low``: the smallest size allowed (``MAY_BE_ZERO`` keys may always be 0); ``skip``: keys not checked
    (``vocab_size`` of a training config is only known once the data is read)."""
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{where}.{key}"
            if isinstance(value, dict | list):
                yield from bad_sizes(value, here, low, skip)
            elif is_size_key(str(key)) and key not in skip:
                lowest, highest = (0 if key in MAY_BE_ZERO else low), SIZE_BOUNDS.get(str(key), MAX_WIDTH)
                if not (
                    isinstance(value, int) and not isinstance(value, bool) and lowest <= value <= highest
                ):
                    yield here, value, lowest, highest
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from bad_sizes(value, f"{where}[{i}]", low, skip)


def _without_weight_files(node: Any) -> Any:
    """The config with ``pretrained: false`` everywhere: a meta build reads no weight file."""
    if isinstance(node, dict):
        return {k: (False if k == "pretrained" else _without_weight_files(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_without_weight_files(v) for v in node]
    return node


def network_size(config: dict, image_size: int | None = None) -> tuple[int, int]:
    """(parameter count, largest activation of the encoder for one ``image_size`` image, in elements; 0
    without ``image_size``) of a CaptionModel config (registered ``_target_`` names), built on the meta
    device: nothing is allocated, whatever the sizes ask for. Raises what the constructors raise."""
    import warnings

    import hydra
    import torch

    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")  # "pretrained=False, ignoring weights_path": said by the real build
        net = hydra.utils.instantiate(_without_weight_files(config), _convert_="all")
    parameters = sum(p.numel() for p in net.parameters())
    if not image_size:
        return parameters, 0
    largest = [image_size * image_size * 3]

    def record(module, inputs, output) -> None:
        for tensor in output if isinstance(output, tuple | list) else (output,):
            if isinstance(tensor, torch.Tensor):
                largest[0] = max(largest[0], tensor.numel())

    hooks = [m.register_forward_hook(record) for m in net.encoder.modules()]
    try:
        with torch.no_grad():
            net.encoder.encode(torch.empty(1, 3, image_size, image_size, device="meta"))
    finally:
        for hook in hooks:
            hook.remove()
    return parameters, largest[0]


def size_problem(config: dict, image_size: int | None = None) -> str | None:
    """What is too large about the network of ``config`` (one phrase), or None when it fits the bounds."""
    parameters, activation = network_size(config, image_size)
    if parameters > MAX_PARAMETERS:
        return f"the network has {parameters:,} parameters; expected at most {MAX_PARAMETERS:,}"
    if activation > MAX_ACTIVATION:
        return (
            f"the encoder's largest activation for one {image_size}x{image_size} image has {activation:,} "
            f"elements; expected at most {MAX_ACTIVATION:,}"
        )
    return None
