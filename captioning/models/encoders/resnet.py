"""torchvision ResNets as encoders, with ImageNet weights read from a local file (never downloaded)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Annotated

import torch
import torchvision

from captioning.bounds import LR_SCALE
from captioning.models.encoders.base import ImageEncoder, check_out_dim, missing_weights_message
from captioning.models.registry import register

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
RESNET_ARCHS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152")
RESNET_STAGES = ("layer1", "layer2", "layer3", "layer4")


@register(module="captioning.models.encoders")
class TorchvisionEncoder(ImageEncoder):
    """A torchvision ResNet cut before avgpool/fc: (B, 3, H, W) -> (B, C, H/32, W/32) -> grid.

    ``freeze`` keeps the backbone fixed (the paper's setting); with ``fine_tune_from`` = k in 1..4 (or
    ``stage{k}``, ``last``, ``all``) the stages layer{k}..layer4 train while the stem and earlier stages
    stay frozen. Stages: stem (conv1, bn1, relu, maxpool), stage1..stage4 (layer1..layer4).
    """

    def __init__(
        self,
        arch: str = "resnet101",
        weights_path: str | None = None,
        pretrained: bool = True,
        freeze: bool = True,
        grid_size: int = 14,
        fine_tune_from: str | int | None = None,
        out_dim: int | None = None,
        bn_eval: bool = True,
        lr_scale: Annotated[float, LR_SCALE] = 0.1,
    ):
        super().__init__()
        if arch not in RESNET_ARCHS:
            raise ValueError(f"unknown arch {arch!r}; expected one of {', '.join(RESNET_ARCHS)}")
        # weights=None: torchvision must never fetch anything; pretrained weights come from weights_path.
        net = getattr(torchvision.models, arch)(weights=None)
        if pretrained:
            if weights_path is None or not Path(weights_path).is_file():
                raise FileNotFoundError(missing_weights_message(f"TorchvisionEncoder({arch})", weights_path))
            state = torch.load(weights_path, map_location="cpu", weights_only=True)
            try:
                net.load_state_dict(state, strict=True)
            except RuntimeError as err:
                raise ValueError(f"{weights_path} is not a torchvision {arch} state dict: {err}") from err
        elif weights_path is not None:
            warnings.warn(
                f"TorchvisionEncoder: pretrained=False, ignoring weights_path={weights_path}", stacklevel=2
            )

        self.out_dim = check_out_dim(f"TorchvisionEncoder({arch})", net.fc.in_features, out_dim)
        self.grid_size = grid_size
        self.mean = IMAGENET_MEAN
        self.std = IMAGENET_STD
        # Same attribute names as torchvision so these state dicts read like the original's.
        self.conv1, self.bn1, self.relu, self.maxpool = net.conv1, net.bn1, net.relu, net.maxpool
        self.layer1, self.layer2, self.layer3, self.layer4 = net.layer1, net.layer2, net.layer3, net.layer4
        # stem: (B, 64, H/4, W/4); stage4: (B, out_dim, H/32, W/32)
        stages = [(f"stage{k}", (name,)) for k, name in enumerate(RESNET_STAGES, 1)]
        self._stages = (("stem", ("conv1", "bn1", "relu", "maxpool")), *stages)
        self._configure_training(freeze, fine_tune_from, bn_eval, lr_scale)
