"""The top-down decoder (Anderson et al. 2018, §3.2) against the paper's equations written with torch's own
LSTM cells, and what it refuses. The contract every decoder keeps (shapes, step = forward, training, beam
search) is checked for it by the tests parametrised over captioning/conf/model/decoder."""

import pytest
import torch
from torch import nn

from captioning.losses import caption_loss
from captioning.models.attention.reinforce import ReinforceHardAttention
from captioning.models.attention.soft import AdditiveAttention
from captioning.models.decoders.base import shift_inputs
from captioning.models.decoders.top_down import TopDownDecoder

from support import ATTENTIONS
from support.helpers import assert_step_matches_forward, build_net, random_batch

V = 12


def reference_cells(dec: TopDownDecoder) -> tuple[nn.LSTMCell, nn.LSTMCell]:
    """torch.nn.LSTMCell pair holding the decoder's weights: LSTM¹ over [h²; ā; E y], LSTM² over [ẑ; h¹]."""
    h, d = dec.hidden_dim, dec.grid_dim
    att = nn.LSTMCell(h + d + dec.embed_dim, h).double()
    lang = nn.LSTMCell(d + h, h).double()
    with torch.no_grad():
        att.weight_ih.copy_(
            torch.cat([dec.gates_rec.weight[:, :h], dec.gates_mean.weight, dec.gates_emb.weight], 1)
        )
        att.weight_hh.copy_(dec.gates_rec.weight[:, h:])
        att.bias_ih.copy_(dec.gates_emb.bias)
        att.bias_hh.zero_()
        lang.weight_ih.copy_(dec.lang_rec.weight[:, : d + h])
        lang.weight_hh.copy_(dec.lang_rec.weight[:, d + h :])
        lang.bias_ih.copy_(dec.lang_bias)
        lang.bias_hh.zero_()
    return att, lang


def test_teacher_forcing_is_eq_2_to_7_with_torch_lstm_cells():
    net = build_net("top_down", V).double().eval()
    dec = net.decoder
    with torch.no_grad():  # a non-zero LSTM² bias, so its place in the cell is checked too
        dec.lang_bias.normal_()
    features, tokens = random_batch(net, batch=3, steps=6, vocab_size=V)
    features = features.double()
    inputs, _ = shift_inputs(tokens)
    with torch.no_grad():
        out = dec(features, inputs)
        att_cell, lang_cell = reference_cells(dec)
        grid = dec.with_positions(features)  # (B, L, D')
        mean = grid.mean(1)  # (B, D') ā: every location valid
        b = grid.shape[0]
        h1 = c1 = h2 = c2 = grid.new_zeros(b, dec.hidden_dim)  # the paper's zero start
        keys = dec.attention.precompute(grid)
        logits, alphas = [], []
        for t in range(inputs.shape[1]):
            h1, c1 = att_cell(torch.cat([h2, mean, dec.embedding(inputs[:, t])], -1), (h1, c1))  # eq. 2
            read = dec.attention(h1, grid, keys, None)  # eq. 3-5, queried by h¹_t
            h2, c2 = lang_cell(torch.cat([read.context, h1], -1), (h2, c2))  # eq. 6
            logits.append(dec.out(h2))  # eq. 7
            alphas.append(read.alphas)
    torch.testing.assert_close(out.logits, torch.stack(logits, 1))
    torch.testing.assert_close(out.alphas, torch.stack(alphas, 1))


def test_the_image_mean_counts_only_valid_locations():
    """ā over a masked grid (padded images) equals ā over the valid cells alone."""
    net = build_net("top_down", V).double().eval()
    dec = net.decoder
    features = torch.randn(1, 9, dec.feature_dim, dtype=torch.float64)
    mask = torch.tensor([[True] * 6 + [False] * 3])
    state = dec.init_state(features, mask)
    grid = dec.with_positions(features)
    torch.testing.assert_close(state["mean_gates"], dec.gates_mean(grid[:, :6].mean(1)))


@pytest.mark.parametrize("training", [True, False])
def test_attention_layers_whose_credit_reruns_the_xu_step_are_refused_in_one_line(training):
    """In either mode: the layer asks for cell rewards only in sampled training batches, but its credit
    would ask for them once trained."""
    layer = ReinforceHardAttention(feature_dim=8 + 4, query_dim=16, attention_dim=8, credit="exact_step")
    layer.train(training)
    with pytest.raises(
        ValueError, match=r"TopDownDecoder: attention ReinforceHardAttention rescores cells.*credit=remaining"
    ):
        TopDownDecoder(layer, vocab_size=V, feature_dim=8, hidden_dim=16, position_dim=4)


def test_a_layer_of_other_sizes_is_refused_naming_both():
    layer = AdditiveAttention(feature_dim=12, query_dim=32, attention_dim=8)
    with pytest.raises(ValueError, match=r"queries of 32.*queries of 16"):
        TopDownDecoder(layer, vocab_size=V, feature_dim=8, hidden_dim=16, position_dim=4)


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_every_attention_layer_trains_and_steps_in_the_top_down_decoder(attention):
    """Each option of model/decoder/attention is passed in: finite gradients reach every weight of both
    LSTMs, and in eval mode init_state/step reproduce teacher forcing (what beam search relies on)."""
    net = build_net("top_down", V, extra=[f"model/decoder/attention={attention}"])
    features, tokens = random_batch(net, batch=3, steps=6, vocab_size=V)
    inputs, targets = shift_inputs(tokens)
    net.train()
    out = net.decoder(features, inputs)
    terms = caption_loss(out, targets, net.decoder)
    terms.loss.backward()
    for name in ("gates_emb.weight", "gates_mean.weight", "gates_rec.weight", "lang_rec.weight", "lang_bias"):
        grad = net.decoder.get_parameter(name).grad
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0, name
    net.eval()
    with torch.no_grad():
        assert_step_matches_forward(net.decoder, features, inputs, net.decoder(features, inputs))
