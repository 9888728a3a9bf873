"""The closed name -> class map from which checkpoints are rebuilt (as litgpt rebuilds its models).

A checkpoint's network config names its classes by ``_target_``; only the names below are built, each
exactly the class it names, so a crafted checkpoint can neither call an arbitrary callable nor build a
library object that is not a network part (a data source, a scorer). A new model part is registered
here, and ``tests/test_checkpoints.py`` checks that every config of ``conf/model/`` uses registered names.
"""

from __future__ import annotations

from captioning.models.attention.dot import DotAttention, ScaledDotAttention
from captioning.models.attention.hard import GumbelHardAttention, ReinforceHardAttention
from captioning.models.attention.multihead import MultiHeadAttention
from captioning.models.attention.soft import AdditiveAttention
from captioning.models.captioner import CaptionModel
from captioning.models.decoders.lstm import LSTMDecoder
from captioning.models.decoders.transformer import TransformerDecoder
from captioning.models.encoders import EfficientNetLite0Encoder, SmallCNN, TorchvisionEncoder

MODEL_CLASSES: dict[str, type] = {
    f"{cls.__module__}.{cls.__qualname__}": cls
    for cls in (
        CaptionModel,
        SmallCNN,
        TorchvisionEncoder,
        EfficientNetLite0Encoder,
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
LEGACY_NAMES: dict[str, str] = {
    "captioning.models.captioner.Captioner": "captioning.models.captioner.CaptionModel",
}


def canonical_name(target: str) -> str | None:
    """The registered name ``target`` stands for (itself, or what a legacy name became); None if neither."""
    target = LEGACY_NAMES.get(target, target)
    return target if target in MODEL_CLASSES else None
