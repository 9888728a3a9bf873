"""Stochastic "hard" attention (Xu et al. §4.1): the context is one grid cell a_{s_t}, not an average.

Both layers score locations exactly as soft attention does (they subclass AdditiveAttention, reusing
``precompute`` and ``scores``), so hard and soft differ only in how α_t is used:

* ``reinforce.ReinforceHardAttention`` samples s_t ~ Categorical(α_t) and trains α with the
  score-function (REINFORCE) estimator of the variational lower bound (see ``estimators.py`` for the
  derivation and sign conventions), a baseline and an entropy bonus.
* ``gumbel.GumbelHardAttention`` picks s_t by Gumbel-max in the forward pass and back-propagates through
  the Gumbel-softmax relaxation (straight-through), with an annealed temperature τ.

This module holds what both share: choosing one location, the one-hot output, replaying recorded
locations, and sampling at inference.

In eval mode both take the most likely location (deterministic, so greedy and beam search are
reproducible), or sample it when ``sample_at_inference``, or, within ``expected_context()``, read the
expected context Σ_i α_i a_i: the authors' code decodes its stochastic-attention models that way
(arctic-captions ``capgen.py``, ``alpha_sample = alpha`` when not sampling), the deterministic
approximation of eq. 11's expectation over s that semi-sampling trains (§4.1). The decoding option
``hard_attention="expected"`` selects it. With a chosen cell ``weights`` are one-hot rows, which
the overlay renderer draws as crisp cells; with the expected context they are α. Training state (baseline, step counter) lives in buffers so it is
checkpointed, and changes only in training mode: ``auxiliary_loss`` also runs on validation batches.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor

from captioning.models.attention.base import (
    AttentionOutput,
    attend,
    entropy_of,
    masked_softmax,
    per_token_mean,  # noqa: F401 - re-exported (it lived here)
    rows_mask,
)
from captioning.models.attention.soft import AdditiveAttention


def masked_log_softmax(scores: Tensor, mask: Tensor | None) -> Tensor:
    """log α over the last dim; invalid locations get a huge negative value (never sampled)."""
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.log_softmax(scores, dim=-1)


class HardAttention(AdditiveAttention):
    """Shared parts: choosing one location and building the one-hot output."""

    stochastic = True
    inference_contexts = ("cell", "expected")  # GenerationConfig.hard_attention

    def __init__(
        self, feature_dim: int, query_dim: int, attention_dim: int = 128, sample_at_inference: bool = False
    ):
        super().__init__(feature_dim, query_dim, attention_dim)
        self.sample_at_inference = sample_at_inference
        self._replay: Tensor | None = None  # (B, T) locations to take instead of choosing (see replay)
        self._replay_step = 0
        self._expected = False  # eval-mode passes read Σ α_i a_i (see expected_context)

    def distribution(
        self, query: Tensor, keys: Tensor, mask: Tensor | None
    ) -> tuple[Tensor, Tensor | None, Tensor, Tensor]:
        """Scores, the mask per query row, α_t and log α_t, each (B·K, L), for queries (B·K, H)."""
        scores, mask = self.scores(query, keys), rows_mask(mask, query.shape[0])
        return scores, mask, masked_softmax(scores, mask), masked_log_softmax(scores, mask)

    @contextlib.contextmanager
    def replay(self, locations: Tensor) -> Iterator[None]:
        """Within the block, the t-th call takes ``locations[:, t]`` (B, T) instead of choosing, so a
        teacher-forced pass re-scores a sampled trajectory: its ``log_prob`` is log α_{t, s_t} of the
        recorded s_t (the self-critical location term). Eval mode only (training draws its own)."""
        if self.training:
            raise RuntimeError("replay scores recorded locations in eval mode; call .eval() first")
        self._replay, self._replay_step = locations, 0
        try:
            yield
        finally:
            self._replay, self._replay_step = None, 0

    @contextlib.contextmanager
    def sampling(self) -> Iterator[None]:
        """Within the block, eval-mode passes sample s_t ~ Categorical(α_t) instead of taking the argmax."""
        before, self.sample_at_inference = self.sample_at_inference, True
        try:
            yield
        finally:
            self.sample_at_inference = before

    @contextlib.contextmanager
    def expected_context(self, on: bool = True) -> Iterator[None]:
        """Within the block, eval-mode passes read the expected context Σ_i α_i a_i (weights = α) instead
        of one cell (``on=False``: one cell, even inside an outer block); sampling (``sampling()``, SCST,
        or a layer built with ``sample_at_inference``) and replay still choose cells."""
        before, self._expected = self._expected, on
        try:
            yield
        finally:
            self._expected = before

    def inference_context(self, name: str) -> contextlib.AbstractContextManager:
        """``"expected"``: ``expected_context()``; ``"cell"``: one cell (``expected_context(False)``)."""
        return self.expected_context(name == "expected")

    def inference_output(self, alphas: Tensor, log_alphas: Tensor, features: Tensor) -> AttentionOutput:
        """The eval-mode output: the expected context (``expected_context``) or the chosen cell."""
        if self._expected and self._replay is None and not self.sample_at_inference:
            return AttentionOutput(
                context=attend(alphas, features),  # (B·K, D) = Σ_i α_i a_i
                weights=alphas,
                alphas=alphas,
                log_prob=torch.zeros_like(alphas[:, 0]),  # no location is chosen
                entropy=entropy_of(alphas),
            )
        return self.one_cell(self.choose(alphas), alphas, log_alphas, features)

    def choose(self, alphas: Tensor) -> Tensor:
        """(B, L) -> (B,) location indices: a sample in training (or when asked), else the argmax."""
        if self._replay is not None:
            index = self._replay[:, self._replay_step]  # (B,)
            self._replay_step += 1
            return index
        if self.training or self.sample_at_inference:
            return torch.multinomial(alphas, 1).squeeze(1)  # masked locations have α = 0: never drawn
        return alphas.argmax(dim=-1)

    @staticmethod
    def one_cell(
        index: Tensor, alphas: Tensor, log_alphas: Tensor, features: Tensor, weights: Tensor | None = None
    ) -> AttentionOutput:
        """Output for chosen locations ``index`` (B,); ``weights`` defaults to the plain one-hot rows."""
        if weights is None:
            weights = F.one_hot(index, alphas.shape[-1]).to(alphas.dtype)  # (B, L)
        context = attend(weights, features)  # (B·K, D) = a_{s_t}
        return AttentionOutput(
            context=context,
            weights=weights,
            alphas=alphas,
            log_prob=log_alphas.gather(1, index.unsqueeze(1)).squeeze(1),  # (B,) log α_{t, s_t}
            entropy=entropy_of(alphas),  # (B,)
        )
