"""Image encoders: normalised images (B, 3, H, W) -> a grid of annotation vectors a_i, (B, L, D).

One family per module, the machinery they share in ``base`` (named stages, freezing and fine-tuning, the
held stages of staged fine-tuning, the prefix a feature cache stores):

    base.py        ImageEncoder
    small_cnn.py   SmallCNN                   from scratch, the synthetic scenes
    resnet.py      TorchvisionEncoder         torchvision ResNets, local ImageNet weights
    lite.py        EfficientNetLiteEncoder    EfficientNet-Lite0/1/2, packaged ImageNet weights

Every class keeps the public path ``captioning.models.encoders.<Class>``: configs' ``_target_``, the
checkpoints' closed registry and the feature cache's key name it, so the files can move without
invalidating any of them.
"""

from captioning.models.encoders.base import ImageEncoder
from captioning.models.encoders.lite import EfficientNetLiteEncoder
from captioning.models.encoders.resnet import IMAGENET_MEAN, IMAGENET_STD, RESNET_ARCHS, TorchvisionEncoder
from captioning.models.encoders.small_cnn import SmallCNN

# The public path (see above), as @register(module=...) gives the three encoders: cache keys hash it.
ImageEncoder.__module__ = __name__

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "RESNET_ARCHS",
    "EfficientNetLiteEncoder",
    "ImageEncoder",
    "SmallCNN",
    "TorchvisionEncoder",
]
