"""Attention layers declare what they can do (``AttentionLayer``'s capabilities); the generic code asks.

A new stochastic layer, defined here in a few lines and subclassing only the base class, is trained one
step (K samples per caption, its REINFORCE-style term) and decoded with ``hard_attention=`` by the code
that serves the project's own layers, with no change anywhere else.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch import Tensor, nn

from captioning.decoding import generate
from captioning.decoding.search import hard_attention_layers
from captioning.losses import caption_loss
from captioning.models.attention.base import AttentionLayer, AttentionOutput, attend, entropy_of, per_image
from captioning.models.attention.gumbel import GumbelHardAttention
from captioning.models.attention.reinforce import ReinforceHardAttention
from captioning.models.attention.soft import AdditiveAttention
from captioning.models.decoders.lstm import LSTMDecoder

from support.helpers import PLAIN_REINFORCE


class CoinAttention(AttentionLayer):
    """Samples one cell from a linear score in training (three samples per caption); in eval mode the
    argmax cell, or the expected context under ``hard_attention="expected"``."""

    stochastic = True
    inference_contexts = ("cell", "expected")
    samples_per_step = 3

    def __init__(self, feature_dim: int, query_dim: int):
        super().__init__()
        self.feature_dim, self.query_dim = feature_dim, query_dim
        self.query = nn.Linear(query_dim, feature_dim)
        self.expected, self.contexts, self.batches = False, [], 0

    def scores(self, query: Tensor, keys: Tensor) -> Tensor:
        q = per_image(self.query(query), keys.shape[0])  # (B, K, D)
        return (q @ keys.transpose(1, 2)).flatten(0, 1)  # (B·K, L)

    def forward(self, query, features, keys, mask=None) -> AttentionOutput:
        alphas = self.scores(query, keys).softmax(-1)
        if not self.training and self.expected:
            return AttentionOutput(attend(alphas, features), alphas, alphas)
        cell = torch.multinomial(alphas, 1) if self.training else alphas.argmax(-1, keepdim=True)
        weights = torch.zeros_like(alphas).scatter(1, cell, 1.0)
        log_prob = alphas.gather(1, cell).squeeze(1).log()
        return AttentionOutput(attend(weights, features), weights, alphas, log_prob, entropy_of(alphas))

    def inference_context(self, name: str) -> contextlib.AbstractContextManager:
        self.contexts.append(name)

        @contextlib.contextmanager
        def reading() -> object:
            before, self.expected = self.expected, name == "expected"
            try:
                yield
            finally:
                self.expected = before

        return reading()

    def start_training_batch(self) -> None:
        self.batches += 1

    def auxiliary_loss(self, log_prob, entropy, reward, token_mask, value=None, alphas=None, cells=None):
        surrogate = -(reward.sum(1, keepdim=True).detach() * log_prob * token_mask).sum() / token_mask.sum()
        return surrogate, {"coin/entropy": entropy.mean().detach()}


def _decoder(attention) -> LSTMDecoder:
    torch.manual_seed(0)
    return LSTMDecoder(attention, vocab_size=12, feature_dim=6, embed_dim=8, hidden_dim=10, position_dim=0)


def test_the_base_class_declares_a_deterministic_soft_layer() -> None:
    soft = AdditiveAttention(feature_dim=5, query_dim=4, attention_dim=6)
    assert (soft.stochastic, soft.samples_per_step, soft.inference_contexts) == (False, 1, ())
    assert not soft.needs_cell_rewards and not soft.rescores_cells and not soft.location_policy
    with soft.inference_context("expected"):  # nothing to switch
        pass
    for cls in (ReinforceHardAttention, GumbelHardAttention):
        plain = PLAIN_REINFORCE if cls is ReinforceHardAttention else {}  # one sample per step
        layer = cls(feature_dim=5, query_dim=4, attention_dim=6, **plain)
        assert layer.stochastic and layer.inference_contexts == ("cell", "expected")
        assert layer.samples_per_step == 1
        assert layer.location_policy == (cls is ReinforceHardAttention)  # Gumbel's cells train by relaxation
    assert ReinforceHardAttention(5, 4, 6, baseline="leave_one_out", num_samples=3).samples_per_step == 3


def test_a_new_stochastic_layer_trains_one_step_through_the_generic_code() -> None:
    decoder = _decoder(lambda feature_dim, query_dim: CoinAttention(feature_dim, query_dim)).train()
    features = torch.randn(2, 9, 6)
    tokens = torch.randint(4, 12, (2, 5))
    tokens[:, 0] = 1
    targets = torch.cat([tokens[:, 1:], torch.full((2, 1), 2)], 1)
    decoder.start_training_batch()
    output = decoder(features, tokens)
    assert output.logits.shape[0] == 2 * 3  # samples_per_step captions per image
    assert output.aux["location_log_prob"].shape == (6, 5)
    terms = caption_loss(output, targets, decoder)
    assert "coin/entropy" in terms.logs and torch.isfinite(terms.loss)
    optimizer = torch.optim.SGD(decoder.parameters(), lr=0.1)
    before = decoder.attention.query.weight.detach().clone()
    terms.loss.backward()
    assert decoder.attention.query.weight.grad.abs().sum() > 0  # the layer's own term reaches it
    optimizer.step()
    assert not torch.equal(before, decoder.attention.query.weight)
    assert decoder.attention.batches == 1


@pytest.mark.parametrize("context", ["cell", "expected"])
def test_a_new_stochastic_layer_decodes_with_the_hard_attention_option(context: str) -> None:
    decoder = _decoder(lambda feature_dim, query_dim: CoinAttention(feature_dim, query_dim)).eval()
    assert hard_attention_layers(decoder) == [decoder.attention]
    out = generate(decoder, torch.randn(2, 9, 6), num_beams=2, max_new_tokens=4, hard_attention=context)
    assert out.tokens.shape[0] == 2 and decoder.attention.contexts == [context]
    one_hot = (out.attention[:, 0].max(-1).values == 1).all()  # the first step: no row has ended
    assert bool(one_hot) == (context == "cell")  # the expected context's weights are α, not one cell


def test_a_soft_layer_is_not_acted_on_by_the_hard_attention_option() -> None:
    decoder = _decoder(lambda feature_dim, query_dim: AdditiveAttention(feature_dim, query_dim, 6)).eval()
    assert hard_attention_layers(decoder) == []
