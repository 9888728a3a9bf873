"""Hard attention trained through the straight-through Gumbel-softmax relaxation (Jang et al. 2017):
Gumbel-max picks one cell in the forward pass, the relaxed sample carries the gradient back.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from captioning.models.attention.base import (
    AttentionOutput,
    CellRewards,
    masked_softmax,
    per_token_mean,
)
from captioning.models.attention.hard import HardAttention
from captioning.models.registry import register


@register
class GumbelHardAttention(HardAttention):
    """Straight-through Gumbel-softmax (Jang et al. 2017; Maddison et al. 2017) hard attention.

    Forward: s_t = argmax_i (e_ti + g_i), g_i ~ Gumbel(0, 1), an exact sample of Categorical(α_t), and the
    context is a_{s_t}. Backward: the gradient of the relaxed weights softmax((e_t + g)/τ) with the same
    noise. τ = max(τ_min, τ_0·exp(−r·step)), step = training updates seen (a checkpointed buffer).
    """

    def __init__(
        self,
        feature_dim: int,
        query_dim: int,
        attention_dim: int = 128,
        tau_start: float = 1.0,
        tau_min: float = 0.5,
        tau_decay: float = 1.0e-4,
        entropy_weight: float = 0.0,
        sample_at_inference: bool = False,
    ):
        super().__init__(feature_dim, query_dim, attention_dim, sample_at_inference)
        if entropy_weight < 0.0:
            raise ValueError(f"GumbelHardAttention: entropy_weight={entropy_weight} must be >= 0 (a bonus)")
        if not 0.0 < tau_min <= tau_start or tau_decay < 0.0:
            raise ValueError(
                f"GumbelHardAttention: need 0 < tau_min ({tau_min}) <= tau_start ({tau_start}) "
                f"and tau_decay >= 0 (got {tau_decay})"
            )
        self.tau_start, self.tau_min, self.tau_decay = tau_start, tau_min, tau_decay
        self.entropy_weight = entropy_weight
        self.register_buffer("step", torch.zeros((), dtype=torch.long))

    @property
    def tau(self) -> float:
        """τ of the current training batch (``step`` counts the training batches started, this one included)."""
        return max(self.tau_min, self.tau_start * math.exp(-self.tau_decay * max(int(self.step) - 1, 0)))

    def start_training_batch(self) -> None:
        self.step += 1  # the training loop's explicit per-batch hook: τ anneals per training update

    def forward(
        self, query: Tensor, features: Tensor, keys: Tensor, mask: Tensor | None = None
    ) -> AttentionOutput:
        scores, mask, alphas, log_alphas = self.distribution(query, keys, mask)  # (B·K, L) each
        if not self.training:
            return self.inference_output(alphas, log_alphas, features)
        # Noise drawn as torch.nn.functional.gumbel_softmax draws it, so the two agree under one seed.
        gumbel = -torch.empty_like(scores).exponential_().log()  # (B·K, L) Gumbel(0, 1)
        relaxed = masked_softmax((scores + gumbel) / self.tau, mask)  # (B·K, L) Gumbel-softmax sample
        index = relaxed.argmax(dim=-1)  # Gumbel-max over valid locations
        hard = F.one_hot(index, scores.shape[-1]).to(relaxed.dtype)  # (B, L)
        # relaxed − relaxed.detach() is exactly 0 in value but carries d(relaxed): the forward weights are
        # exactly one-hot (unlike hard − relaxed.detach() + relaxed, which rounds) and the backward is the
        # relaxed softmax's.
        weights = hard + (relaxed - relaxed.detach())
        return self.one_cell(index, alphas, log_alphas, features, weights=weights)

    def auxiliary_loss(
        self,
        log_prob: Tensor,
        entropy: Tensor,
        reward: Tensor,
        token_mask: Tensor,
        value: Tensor | None = None,
        alphas: Tensor | None = None,
        cells: CellRewards | None = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """No estimator term (gradients flow through the relaxation); optional entropy bonus."""
        entropy_mean = per_token_mean(entropy, token_mask)
        reward = reward.sum(1) if reward.dim() == 2 else reward  # per-token rewards -> log p(y | s, a)
        logs = {
            "reward_mean": reward.detach().mean(),
            "attention_entropy": entropy_mean.detach(),
            "tau": reward.new_tensor(self.tau),  # the τ this batch was trained with
        }
        if not self.training:
            return reward.new_zeros(()), logs
        return -self.entropy_weight * entropy_mean, logs
