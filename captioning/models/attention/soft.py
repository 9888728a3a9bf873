"""Deterministic soft attention, Bahdanau additive scores (Xu et al. §4.2).

e_ti = v^T tanh(W_k a_i + W_q h_{t-1})      (eq. 4, f_att as a one-hidden-layer MLP)
α_t  = softmax(e_t)                          (eq. 5)
ẑ_t  = Σ_i α_ti a_i                          (eq. 13, the expected context)
W_k a_i does not depend on t, so it is computed once per image by ``precompute``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from captioning.models.attention.base import AttentionLayer


class AdditiveAttention(AttentionLayer):
    def __init__(self, feature_dim: int, query_dim: int, attention_dim: int = 512):
        super().__init__()
        self.feature_dim, self.query_dim, self.attention_dim = feature_dim, query_dim, attention_dim
        self.key_proj = nn.Linear(feature_dim, attention_dim)  # W_k (its bias plays the role of b)
        self.query_proj = nn.Linear(query_dim, attention_dim, bias=False)  # W_q
        self.score = nn.Linear(attention_dim, 1, bias=False)  # v

    def precompute(self, features: Tensor) -> Tensor:
        return self.key_proj(features)  # (B, L, A)

    def scores(self, query: Tensor, keys: Tensor) -> Tensor:
        q = self.query_proj(query).unsqueeze(1)  # (B, 1, A)
        return self.score(torch.tanh(keys + q)).squeeze(-1)  # (B, L, A) -> (B, L)
