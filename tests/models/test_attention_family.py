"""Dot, scaled dot and multi-head attention for the LSTM: the equations, and the decoder built with each."""

import math

import pytest
import torch
from test_attention import build_attention

from captioning.decoding import beam_search, greedy
from captioning.losses import caption_loss
from captioning.models.decoders.base import shift_inputs

from support.helpers import assert_step_matches_forward, build_net, random_batch

V = 12
FAMILY = ["dot", "scaled_dot", "multihead"]


def test_dot_scores_are_h_dot_wk_a():
    torch.manual_seed(0)
    att = build_attention("dot")
    a, h = torch.randn(2, 5, 8), torch.randn(2, 6)
    e = torch.einsum("bh,blh->bl", h, a @ att.key_proj.weight.T)  # h · (W_k a_i)
    torch.testing.assert_close(att(h, a, att.precompute(a)).alphas, torch.softmax(e, -1))
    assert att.key_proj.bias is None  # a key bias adds h·b to every location: cancels in the softmax


def test_scaled_dot_divides_the_dot_scores_by_sqrt_query_dim():
    torch.manual_seed(0)
    dot, scaled = build_attention("dot"), build_attention("scaled_dot")
    scaled.load_state_dict(dot.state_dict())
    a, h = torch.randn(2, 5, 8), torch.randn(2, 6)
    e = dot.scores(h, dot.precompute(a))
    torch.testing.assert_close(scaled.scores(h, scaled.precompute(a)), e / math.sqrt(6))
    torch.testing.assert_close(scaled(h, a, scaled.precompute(a)).alphas, torch.softmax(e / math.sqrt(6), -1))


def test_multihead_weights_are_the_mean_of_per_head_softmaxes():
    torch.manual_seed(0)
    att = build_attention("multihead")
    heads, dim = att.num_heads, att.attention_dim // att.num_heads
    a, h = torch.randn(2, 5, 8), torch.randn(2, 6)
    q = (h @ att.query_proj.weight.T + att.query_proj.bias).view(2, heads, dim)  # (B, h, d)
    k = (a @ att.key_proj.weight.T + att.key_proj.bias).view(2, 5, heads, dim)  # (B, L, h, d)
    per_head = torch.softmax(torch.einsum("bhd,blhd->bhl", q, k) / math.sqrt(dim), -1)  # (B, h, L)
    out = att(h, a, att.precompute(a))
    torch.testing.assert_close(att.head_alphas(h, att.precompute(a)), per_head)
    torch.testing.assert_close(out.alphas, per_head.mean(1))
    # heads averaged is exact: the context is the mean of the per-head contexts
    torch.testing.assert_close(out.context, torch.einsum("bhl,bld->bhd", per_head, a).mean(1))


@pytest.mark.parametrize("name", FAMILY)
def test_lstm_with_each_attention_steps_like_teacher_forcing_and_trains(name):
    # soft.yaml is packaged at model.net.decoder, so Hydra names its attention default with that package.
    net = build_net("soft", V, extra=[f"model/decoder/attention={name}"], seed=1)
    features, tokens = random_batch(net, batch=3, steps=6, vocab_size=V)
    net.train()
    inputs, targets = shift_inputs(tokens)
    caption_loss(net.decoder(features, inputs), targets, net.decoder).loss.backward()
    grads = [p.grad for p in net.decoder.attention.parameters()]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)  # the scores learn
    net.eval()
    with torch.no_grad():
        full = net.decoder(features, tokens)
        assert_step_matches_forward(net.decoder, features, tokens, full)
    g = greedy(net.decoder, features, max_new_tokens=6)
    b = beam_search(net.decoder, features, num_beams=1, max_new_tokens=6)
    assert torch.equal(g.tokens, b.tokens)
