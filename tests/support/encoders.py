"""One tiny, randomly initialised encoder of every family (name -> factory(**training options)), for the
tests of fine-tuning, the prefix cache and staged fine-tuning to parametrise over."""

from __future__ import annotations

from captioning.models.encoders import EfficientNetLiteEncoder, SmallCNN, TorchvisionEncoder

FAMILIES = {  # name -> factory(**training options); random weights, tiny where the family allows
    "small_cnn": lambda **kw: SmallCNN(out_dim=16, grid_size=3, width=8, **kw),
    "resnet18": lambda **kw: TorchvisionEncoder("resnet18", pretrained=False, grid_size=2, **kw),
    "lite0_stride16": lambda **kw: EfficientNetLiteEncoder(pretrained=False, stage="stride16", **kw),
    "lite0_head": lambda **kw: EfficientNetLiteEncoder(pretrained=False, stage="head", grid_size=2, **kw),
    "lite1_multilevel": lambda **kw: EfficientNetLiteEncoder(
        pretrained=False, stage="multilevel", variant="lite1", grid_size=2, **kw
    ),
}
