"""What every image encoder shares: normalised images (B, 3, H, W) -> a grid of annotation vectors a_i,
(B, L, D), through named stages that freeze, fine-tune, hold and cache the same way in every family.

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

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from captioning.bounds import LEARNING_RATE, LR_SCALE


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
        if not LR_SCALE.holds(lr_scale):  # its bound, declared once (captioning.bounds)
            raise ValueError(
                f"{what}: lr_scale must be > 0 and <= {LR_SCALE.high} (encoder LR = lr_scale x the "
                f"optimizer's lr, itself below {LEARNING_RATE.high}), got {lr_scale}"
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


def missing_weights_message(what: str, weights_path: str | None) -> str:
    where = "weights_path is null" if weights_path is None else f"weights file not found: {weights_path}"
    return (
        f"{what}: pretrained=True but {where}. Point weights_path at a local state dict "
        "(nothing is downloaded), or set `pretrained: false` to train from scratch"
    )


def check_out_dim(what: str, actual: int, declared: int | None) -> int:
    """Backbones fix D; configs declare it (``out_dim``) so decoders can size themselves at compose time."""
    if declared is not None and declared != actual:
        raise ValueError(f"{what} gives {actual}-dim features but the config declares out_dim={declared}")
    return actual
