"""Multiplicative (Luong et al. 2015) soft attention for the LSTM: dot and scaled dot-product scores.

e_ti = h_{t-1} · k_i,   k_i = W_k a_i      (DotAttention)
e_ti = h_{t-1} · k_i / √H                   (ScaledDotAttention, Vaswani et al. 2017)
α_t  = softmax(e_t),    ẑ_t = Σ_i α_ti a_i

Luong's plain dot needs the query and the annotation vectors in one space, but the LSTM state has H
dimensions and the grid D. Of the two ways to meet, the *keys* are projected into the query space
(rather than the query into the feature space): h·(W_k a) = (W_kᵀ h)·a is the same bilinear score
(Luong's "general" form), but W_k a_i depends only on the image, so ``precompute`` does it once per
image and each step is a single (B, L, H) x (B, H) product. W_k has no bias: h·b is the same for every
location and cancels in the softmax. The scaling keeps the scores' variance independent of H, which
matters when H is large and the softmax would otherwise saturate.
"""

from __future__ import annotations

import math

from torch import Tensor, nn

from captioning.models.attention.base import AttentionLayer, per_image
from captioning.models.registry import register


@register
class DotAttention(AttentionLayer):
    def __init__(self, feature_dim: int, query_dim: int):
        super().__init__()
        self.feature_dim, self.query_dim = feature_dim, query_dim
        self.key_proj = nn.Linear(feature_dim, query_dim, bias=False)  # W_k: grid -> query space
        self.scale = 1.0

    def precompute(self, features: Tensor) -> Tensor:
        return self.key_proj(features)  # (B, L, H)

    def scores(self, query: Tensor, keys: Tensor) -> Tensor:
        q = per_image(query, keys.shape[0])  # (B, K, H): K query rows (beams) per image
        e = q @ keys.transpose(1, 2)  # (B, K, H) @ (B, H, L) -> (B, K, L)
        return e.flatten(0, 1) * self.scale  # (B·K, L)


@register
class ScaledDotAttention(DotAttention):
    def __init__(self, feature_dim: int, query_dim: int):
        super().__init__(feature_dim, query_dim)
        self.scale = 1.0 / math.sqrt(query_dim)  # 1/√H
