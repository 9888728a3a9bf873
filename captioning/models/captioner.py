"""CaptionModel = encoder (images -> grid) + decoder (grid -> words)."""

from __future__ import annotations

from torch import Tensor, nn

from captioning.models.decoders.base import Decoder, DecoderOutput


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
        """(B, 3, H, W) images -> (B, L, D) grid; a (B, L, D) input is already a grid and passes through.

        The pass-through lets training read precomputed features of a frozen encoder
        (captioning.data.features) while the checkpoint keeps the encoder for raw images.
        """
        if images.dim() == 3:
            expected = (self.grid_size**2, self.encoder.out_dim)
            if tuple(images.shape[1:]) != expected:
                raise ValueError(
                    f"precomputed features have shape {tuple(images.shape)}, expected (B, L, D) = "
                    f"(B, {expected[0]}, {expected[1]}) for this encoder's {self.grid_size}x{self.grid_size} grid"
                )
            return images
        return self.encoder.encode(images)  # (B, 3, H, W) in [0, 1] -> (B, L, D), normalised there

    def forward(self, images: Tensor, tokens: Tensor) -> DecoderOutput:
        return self.decoder(self.encode(images), tokens)
