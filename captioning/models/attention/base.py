"""What an attention layer is: a module the decoder calls once per step with its hidden state.

``precompute(features)`` runs once per image (keys such as W_k·a_i are independent of the step), and
``forward(query, features, keys, mask)`` returns the context vector ẑ_t with the weights used.
Layers are passed into decoders (timm style), so swapping soft for hard attention is a config change.

Queries may come K rows per image (beam search: B·K rows, an image's K beams adjacent) while the
image-only tensors (features, keys, mask) keep their B rows: they are never copied K times, and each
step reads them once per image. K = 1 in training. ``per_image`` and ``attend`` do the grouping.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import Tensor, nn


@dataclass
class AttentionOutput:
    context: Tensor  # (B, D) ẑ_t, the context vector fed to the LSTM (Xu et al. eq. 1-3)
    weights: Tensor  # (B, L) weights applied to the features (one-hot for hard attention)
    alphas: Tensor  # (B, L) the attention distribution α_t (Xu et al. eq. 5)
    log_prob: Tensor | None = None  # (B,) log α_{t, s_t} of a sampled location (stochastic layers)
    entropy: Tensor | None = None  # (B,) H[α_t], for entropy bonuses and logging
    value: Tensor | None = None  # (B,) a learned baseline b(h_{t-1}) of the location choice (REINFORCE)


@dataclass
class CellRewards:
    """r_t(i) = log p(y_t | s_t = i, s_{<t}) for a few cells i of every step (REINFORCE credit="exact_step"):
    the C − 1 cells the layer asked for (``ReinforceHardAttention.cells_to_rescore``), then the sampled one."""

    index: Tensor  # (B, T, C) cell indices; the last column is the sampled s_t
    reward: Tensor  # (B, T, C) their log-likelihoods of word t (with the graph of the step's own weights)

    def split(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(S's indices, S's rewards) (B, T, C−1), then the sampled s_t and r_t(s_t) (B, T)."""
        return self.index[..., :-1], self.reward[..., :-1], self.index[..., -1], self.reward[..., -1]

    def sampled_in_set(self) -> Tensor:
        """(B, T) bool: 1[s_t ∈ S]."""
        return (self.index[..., :-1] == self.index[..., -1:]).any(-1)


class AttentionLayer(nn.Module):
    """The interface decoders, decoding and tuning use. What a layer can do is declared by the capabilities
    below (defaults: a deterministic soft layer), which the generic code asks instead of testing classes,
    so a new layer needs no change elsewhere."""

    feature_dim: int
    query_dim: int
    # Chooses locations at random in training (hard attention): its outputs carry ``log_prob`` / ``entropy``
    # and ``auxiliary_loss`` trains the choice.
    stochastic: bool = False
    # The ``hard_attention=`` decoding values (GenerationConfig) the layer reads in eval mode, entered with
    # ``inference_context``; empty: the option does not apply to it (soft attention is the expectation).
    inference_contexts: tuple[str, ...] = ()
    # True while the layer wants r_t(i) = log p(y_t | s_t = i, s_{<t}) for some cells i passed to
    # ``auxiliary_loss`` as ``cells`` (REINFORCE with credit="exact_step"); the decoder computes them for
    # the cells ``cells_to_rescore`` names.
    needs_cell_rewards: bool = False
    # Whether its credit asks for those at all (in any mode): a decoder that cannot rerun a step refuses it.
    rescores_cells: bool = False
    # Its cell choice is a policy trained by the score function (REINFORCE): a sequence-level objective
    # can sample the cells (``sampling``), replay them (``replay``, which returns log α_{t, s_t}) and
    # credit them with the caption's reward (SCST's ``location_policy``).
    location_policy: bool = False

    @property
    def samples_per_step(self) -> int:
        """K attention samples per caption in training (the decoder decodes every caption K times, in
        adjacent rows); 1 for deterministic layers."""
        return 1

    def inference_context(self, name: str) -> contextlib.AbstractContextManager:
        """Within the block, eval-mode passes read the context ``name`` (one of ``inference_contexts``)."""
        return contextlib.nullcontext()

    def start_training_batch(self) -> None:
        """Per-batch state (a semi-sampling coin, an annealed temperature); nothing by default."""

    def cells_to_rescore(self, alphas: Tensor, chosen: Tensor) -> Tensor:
        """(B, T, C) cells whose r_t(i) the layer wants while ``needs_cell_rewards``, the sampled one last."""
        raise NotImplementedError(f"{type(self).__name__} asks for no cell rewards")

    def precompute(self, features: Tensor) -> Tensor:
        """Per-image keys, computed once; ``features`` (B, L, D)."""
        return features

    def scores(self, query: Tensor, keys: Tensor) -> Tensor:
        """Unnormalised scores e_t (B, L) of every location for the query (B, H)."""
        raise NotImplementedError

    def forward(
        self, query: Tensor, features: Tensor, keys: Tensor, mask: Tensor | None = None
    ) -> AttentionOutput:
        """Deterministic attention: α = softmax(e), ẑ = Σ_i α_i a_i (stochastic layers override this)."""
        alphas = masked_softmax(self.scores(query, keys), rows_mask(mask, query.shape[0]))  # (B·K, L)
        return AttentionOutput(context=attend(alphas, features), weights=alphas, alphas=alphas)

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
        """Training terms of stochastic layers (REINFORCE); deterministic layers add nothing."""
        return reward.new_zeros(()), {}


def per_image(rows: Tensor, images: int) -> Tensor:
    """(B·K, ...) -> (B, K, ...): the K query rows (beams) of each image, which are adjacent."""
    return rows.view(images, rows.shape[0] // images, *rows.shape[1:])


def attend(weights: Tensor, features: Tensor) -> Tensor:
    """Σ_i w_i a_i for weights (B·K, L) over features (B, L, D) -> (B·K, D), features read once per image."""
    w = per_image(weights, features.shape[0])  # (B, K, L)
    return (w @ features).flatten(0, 1)  # (B, K, L) @ (B, L, D) -> (B, K, D) -> (B·K, D)


def rows_mask(mask: Tensor | None, rows: int) -> Tensor | None:
    """A (B, L) location mask repeated for B·K query rows (None stays None)."""
    if mask is None or mask.shape[0] == rows:
        return mask
    return mask.repeat_interleave(rows // mask.shape[0], dim=0)  # (B·K, L)


def masked_softmax(scores: Tensor, mask: Tensor | None) -> Tensor:
    """Softmax over the last dim with invalid locations (mask False) given exactly zero weight."""
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1)


def entropy_of(alphas: Tensor) -> Tensor:
    """H[α] = -Σ_i α_i log α_i over the last dim, with 0·log 0 = 0."""
    return -(alphas * torch.log(alphas.clamp_min(1e-12))).sum(-1)


def per_token_mean(values: Tensor, token_mask: Tensor) -> Tensor:
    """Σ_{b,t} values·mask / Σ mask: the same normalisation as the cross-entropy (per target token).

    Both sums run in float32: under bf16 autocast a sum of ones is inexact past 256."""
    return (values.float() * token_mask.float()).sum() / token_mask.float().sum().clamp_min(1.0)
