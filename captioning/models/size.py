"""Whether a network config's sizes fit the bounds (``captioning.bounds``), checked without building it.

Two checks, shared by the start-up check of a training config (``captioning.training.validate`` and
``build``) and the loading of a checkpoint (``captioning.checkpoints.load``), so whatever trains can be
loaded and a crafted checkpoint can neither allocate terabytes nor hang: every size key of the config
within its range (``bad_sizes``), then the network built on the meta device, its parameter count and its
encoder's largest activation within theirs (``size_problem``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from captioning.bounds import MAX_ACTIVATION, MAX_PARAMETERS, MAX_WIDTH, MAY_BE_ZERO, SIZE_BOUNDS


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
