"""CaptionModel = encoder (images -> grid) + decoder (grid -> words).

The grid comes from one of two explicit inputs, never told apart by shape: ``images`` (B, 3, H, W) run
through the whole encoder; ``features`` are what a feature cache stored for this encoder
(captioning.data.features.CachedEncoder): its (B, L, D) grid when the encoder is frozen, or the
(B, C, h, w) activations of its frozen prefix when its last stages train (only those stages run).
Batches name which they carry (``images`` or ``features``); ``encode_batch`` picks the path.
"""

from __future__ import annotations

from torch import Tensor, nn

from captioning.models.decoders.base import Decoder, DecoderOutput
from captioning.models.registry import register


@register
class CaptionModel(nn.Module):
    def __init__(self, encoder: nn.Module, decoder: Decoder):
        super().__init__()
        if encoder.out_dim != decoder.feature_dim:
            raise ValueError(
                f"encoder gives {encoder.out_dim}-dim features but the decoder expects "
                f"feature_dim={decoder.feature_dim}; set model.decoder.feature_dim=${{model.encoder.out_dim}}"
            )
        self.encoder, self.decoder = encoder, decoder

    @property
    def grid_size(self) -> int:
        return self.encoder.grid_size

    def encode(self, images: Tensor) -> Tensor:
        """(B, 3, H, W) images in [0, 1] -> (B, L, D) grid (normalised by the encoder itself)."""
        if images.dim() != 4 or images.shape[1] != 3:
            raise ValueError(
                f"CaptionModel.encode takes (B, 3, H, W) images, got {tuple(images.shape)}; cached encoder "
                "outputs go to encode_features"
            )
        return self.encoder.encode(images)

    def encode_features(self, features: Tensor) -> Tensor:
        """Cached encoder output -> (B, L, D) grid. A frozen encoder's cache holds the grid itself; an
        encoder whose last stages train (the rule of FeatureCache: any parameter requires grad) caches the
        activations of its frozen prefix, and only the stages from ``cache_stop`` on run here."""
        encoder = self.encoder
        if not any(p.requires_grad for p in encoder.parameters()):
            expected = (self.grid_size**2, encoder.out_dim)
            if features.dim() != 3 or tuple(features.shape[1:]) != expected:
                raise ValueError(
                    f"precomputed features have shape {tuple(features.shape)}, expected (B, L, D) = "
                    f"(B, {expected[0]}, {expected[1]}) for this encoder's {self.grid_size}x{self.grid_size} grid"
                )
            return features
        stop = getattr(encoder, "cache_stop", 0)
        if (
            not 0 < stop < len(encoder.stage_names)
            or features.dim() != 4
            or (features.shape[1] != encoder.prefix_channels)
        ):
            raise ValueError(
                f"{type(encoder).__name__}: got ({', '.join(map(str, features.shape))}) features, not the "
                "cached activations before its first trained stage"
            )
        return encoder.forward_from(features, stop)  # (B, L, D)

    def encode_batch(self, batch: dict) -> Tensor:
        """The (B, L, D) grid of a batch that carries ``features`` (cached) or ``images``."""
        if batch.get("features") is not None:
            return self.encode_features(batch["features"])
        if batch.get("images") is not None:
            return self.encode(batch["images"])
        raise ValueError(f"a batch carries 'images' or 'features', this one has {sorted(batch)}")

    def forward(
        self, images: Tensor | None = None, tokens: Tensor | None = None, *, features: Tensor | None = None
    ) -> DecoderOutput:
        """Teacher-forced decoding of ``tokens`` over ``images`` or cached ``features`` (exactly one)."""
        if (images is None) == (features is None):
            raise ValueError("CaptionModel: pass images or features (exactly one)")
        if tokens is None:
            raise ValueError("CaptionModel: tokens are required")
        grid = self.encode(images) if features is None else self.encode_features(features)
        return self.decoder(grid, tokens)
