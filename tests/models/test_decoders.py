"""Every decoder option in captioning/conf/model/decoder is built from its config and checked the same way."""

import math
from functools import partial

import pytest
import torch

from captioning.decoding import greedy
from captioning.losses import attention_entropy, caption_loss, doubly_stochastic
from captioning.models.attention.base import per_token_mean
from captioning.models.attention.soft import AdditiveAttention
from captioning.models.decoders.base import shift_inputs
from captioning.models.decoders.lstm import LSTMDecoder
from captioning.models.position import sinusoidal_2d

from support import DECODERS
from support.helpers import assert_step_matches_forward, build_net, random_batch

V = 12


@pytest.mark.parametrize("decoder", DECODERS)
def test_forward_shapes_and_finite_gradients(decoder):
    net = build_net(decoder, V)
    net.train()
    features, tokens = random_batch(net, batch=3, steps=6, vocab_size=V)
    inputs, targets = shift_inputs(tokens)
    out = net.decoder(features, inputs)
    L = features.shape[1]
    k = getattr(getattr(net.decoder, "attention", None), "num_samples", 1)  # K attention samples in training
    assert out.logits.shape == (3 * k, 5, V)
    assert out.attention.shape == (3 * k, 5, L) and out.alphas.shape == (3 * k, 5, L)
    torch.testing.assert_close(out.alphas.sum(-1), torch.ones(3 * k, 5))
    terms = caption_loss(out, targets, net.decoder)
    terms.loss.backward()
    grads = [p.grad for p in net.decoder.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert sum(g.abs().sum() for g in grads) > 0


@pytest.mark.parametrize("decoder", DECODERS)
def test_step_matches_teacher_forcing_in_eval_mode(decoder):
    """init_state/step reproduce forward() token by token (the contract decoding relies on)."""
    net = build_net(decoder, V).eval()
    features, tokens = random_batch(net, batch=2, steps=5, vocab_size=V)
    with torch.no_grad():
        full = net.decoder(features, tokens)
        assert_step_matches_forward(net.decoder, features, tokens, full)


def test_doubly_stochastic_regulariser_is_eq_14():
    alphas = torch.tensor([[[0.5, 0.5], [1.0, 0.0], [0.3, 0.7]]])  # (B=1, T=3, L=2)
    mask = torch.tensor([[1.0, 1.0, 0.0]])  # the third step is padding
    # Σ_t α = (1.5, 0.5) -> (1 - 1.5)² + (1 - 0.5)² = 0.5
    torch.testing.assert_close(doubly_stochastic(alphas, mask), torch.tensor([0.5]))


def test_padding_does_not_change_the_loss():
    net = build_net("soft", V).eval()
    net.decoder.alpha_c = 0.0  # the cross-entropy alone
    features, tokens = random_batch(net, batch=1, steps=5, vocab_size=V)
    inputs, targets = shift_inputs(tokens)
    padded_in = torch.cat([inputs, torch.zeros(1, 3, dtype=torch.long)], 1)
    padded_tg = torch.cat([targets, torch.zeros(1, 3, dtype=torch.long)], 1)
    a = caption_loss(net.decoder(features, inputs), targets, net.decoder)
    b = caption_loss(net.decoder(features, padded_in), padded_tg, net.decoder)
    torch.testing.assert_close(a.xent, b.xent)


def test_the_per_token_mean_counts_tokens_exactly_under_bf16():
    # bf16 holds integers exactly only up to 256: a bf16 sum of 515 ones is 516. The normalisation of the
    # cross-entropy and of every auxiliary term (per_token_mean) must count in float32 whatever the
    # logits' dtype (bf16-mixed autocast on a GPU).
    values = torch.full((5, 103), 2.0, dtype=torch.bfloat16)  # 515 tokens, each worth 2
    mask = torch.ones(5, 103, dtype=torch.bfloat16)
    assert mask.sum().item() == 516.0  # the inexact sum this guards against
    assert per_token_mean(values, mask).item() == 2.0
    assert per_token_mean(values, mask).dtype == torch.float32


@pytest.mark.parametrize("decoder", DECODERS)
def test_label_smoothing_matches_torch_and_leaves_xent_true(decoder):
    """The smoothed fit equals torch's cross_entropy(label_smoothing=ε) over the real tokens (an outside
    implementation); xent, what runs compare, stays the unsmoothed likelihood."""
    net = build_net(decoder, V).eval()
    net.decoder.alpha_c, net.decoder.entropy_c = 0.0, 0.0  # the cross-entropy alone
    features, tokens = random_batch(net, batch=3, steps=6, vocab_size=V)
    inputs, targets = shift_inputs(tokens)
    targets[0, -2:] = 0  # some padding, which neither term may count
    with torch.no_grad():
        out = net.decoder(features, inputs)
        plain, smoothed = (caption_loss(out, targets, net.decoder, eps) for eps in (0.0, 0.1))
    rows = out.logits.shape[0] // targets.shape[0]
    flat_targets = targets.repeat_interleave(rows, 0).reshape(-1)
    reference = torch.nn.functional.cross_entropy(
        out.logits.reshape(-1, V).float(), flat_targets, ignore_index=0, label_smoothing=0.1
    )
    # The decoder's own terms are the same in both (they see the true likelihood), so they cancel.
    torch.testing.assert_close(smoothed.loss - plain.loss + plain.xent, reference)
    torch.testing.assert_close(smoothed.xent, plain.xent)


def lstm_decoders() -> list[str]:
    """The decoder configs that build the LSTM (by their composed ``_target_``, not by name)."""
    from captioning.compose import compose_config

    targets = {d: compose_config("train", [f"model/decoder={d}"])[0].model.decoder._target_ for d in DECODERS}
    return [d for d, target in targets.items() if target.endswith(".LSTMDecoder")]


@pytest.mark.parametrize("decoder", lstm_decoders())
def test_lstm_reads_each_location_with_a_fixed_2d_position_code(decoder):
    """[a_i; PE(row_i, col_i)]: the features untouched, the code fixed, so the grid needs no gradient."""
    net = build_net(decoder, V)
    dec = net.decoder
    features = torch.randn(2, 9, dec.feature_dim)  # (B, L, D), a 3x3 grid
    grid = dec.with_positions(features)
    assert grid.shape == (2, 9, dec.feature_dim + dec.position_dim) and dec.position_dim > 0
    torch.testing.assert_close(grid[..., : dec.feature_dim], features)
    code = sinusoidal_2d(3, 3, dec.position_dim)  # (L, P)
    torch.testing.assert_close(grid[..., dec.feature_dim :], code.expand(2, 9, -1))
    assert not grid.requires_grad  # nothing to back-propagate into at every step
    assert dec.attention.feature_dim == dec.grid_dim == dec.feature_dim + dec.position_dim


@pytest.mark.parametrize("position_dim", [0, 32])
def test_transformer_memory_reads_the_grid_with_a_2d_position_code(position_dim):
    """position_dim 0: LN(W a + PE_D); P > 0: LN(W [a; PE_P]), the LSTM's reading; both decode the same
    way step by step as in teacher forcing."""
    net = build_net("transformer", V, extra=[f"model.decoder.position_dim={position_dim}"]).eval()
    dec = net.decoder
    features, tokens = random_batch(net, batch=2, steps=5, vocab_size=V)
    side = int(features.shape[1] ** 0.5)
    if position_dim:
        code = sinusoidal_2d(side, side, position_dim).expand(2, -1, -1)  # (B, L, P)
        expected = dec.memory_norm(dec.memory_proj(torch.cat([features, code], -1)))
    else:
        expected = dec.memory_norm(dec.memory_proj(features) + sinusoidal_2d(side, side, dec.embed_dim))
    torch.testing.assert_close(dec.encode_memory(features), expected)
    assert dec.memory_proj.in_features == dec.feature_dim + position_dim
    with torch.no_grad():
        assert_step_matches_forward(dec, features, tokens, dec(features, tokens))


def test_transformer_learned_positions_are_row_plus_column_embeddings_and_refuse_larger_grids():
    net = build_net("transformer", V, extra=["model.decoder.learned_positions=6"]).eval()
    dec = net.decoder
    features, tokens = random_batch(net, batch=2, steps=5, vocab_size=V)
    side = int(features.shape[1] ** 0.5)
    r, c = 1, side - 1  # the cell in row 1, last column: index r * side + c of the row-major grid
    code = dec.row_positions.weight[r] + dec.col_positions.weight[c]  # (D,)
    torch.testing.assert_close(dec.grid_positions(side, features.device)[r * side + c], code)
    expected = dec.memory_norm(dec.memory_proj(features) + dec.grid_positions(side, features.device))
    torch.testing.assert_close(dec.encode_memory(features), expected)
    inputs, targets = shift_inputs(tokens)
    caption_loss(dec(features, inputs), targets, dec).loss.backward()
    assert dec.row_positions.weight.grad[:side].abs().sum() > 0  # learned: the loss reaches them
    assert dec.row_positions.weight.grad[side:].abs().sum() == 0  # rows the grid does not have
    with torch.no_grad():
        assert_step_matches_forward(dec, features, tokens, dec(features, tokens))
    with pytest.raises(ValueError, match=r"a 7x7 grid, but learned_positions=6"):
        dec.encode_memory(torch.randn(1, 49, dec.feature_dim))
    with pytest.raises(Exception, match="needs position_dim=0"):  # Hydra wraps the ValueError
        build_net(
            "transformer", V, extra=["model.decoder.learned_positions=6", "model.decoder.position_dim=32"]
        )


@pytest.mark.slow
@pytest.mark.parametrize("decoder", ["soft", "transformer"])
def test_compiled_step_computes_the_same_gradients_and_captions(decoder):
    """model.compile=true: torch.compile of the per-token step changes speed, not results (the LSTM's
    compiled step also runs inside training's forward, with the deferred weight gradient)."""
    net = build_net(decoder, V, seed=1).eval()  # eval: no dropout, so both runs see the same function
    features, tokens = random_batch(net, batch=3, steps=6, vocab_size=V)
    inputs, targets = shift_inputs(tokens)

    def run():
        net.zero_grad(set_to_none=True)
        caption_loss(net.decoder(features, inputs), targets, net.decoder).loss.backward()
        grads = {n: p.grad.clone() for n, p in net.decoder.named_parameters() if p.grad is not None}
        with torch.no_grad():
            return grads, greedy(net.decoder, features, max_new_tokens=7).tokens

    eager_grads, eager_tokens = run()
    net.decoder.compile_step()
    grads, tokens_out = run()
    assert torch.equal(tokens_out, eager_tokens)
    assert grads.keys() == eager_grads.keys()
    for name, g in grads.items():
        torch.testing.assert_close(g, eager_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_alpha_c_weights_the_eq_14_term_of_the_loss():
    net = build_net("soft", V).eval()
    features, tokens = random_batch(net, batch=2, steps=5, vocab_size=V)
    inputs, targets = shift_inputs(tokens)
    out = net.decoder(features, inputs)
    assert net.decoder.alpha_c == 0.0 and caption_loss(out, targets, net.decoder).attention_reg == 0
    net.decoder.alpha_c = 2.0
    terms = caption_loss(out, targets, net.decoder)
    mask = (targets != 0).float()
    torch.testing.assert_close(terms.attention_reg, 2.0 * doubly_stochastic(out.alphas, mask).mean())
    torch.testing.assert_close(terms.loss, terms.xent + terms.attention_reg)


def test_entropy_c_adds_the_per_token_attention_entropy_and_its_gradient_sharpens():
    alphas = torch.tensor([[[0.5, 0.5], [1.0, 0.0], [0.3, 0.7]]])  # (B=1, T=3, L=2)
    mask = torch.tensor([[1.0, 1.0, 0.0]])  # the third step is padding
    torch.testing.assert_close(
        attention_entropy(alphas, mask), torch.tensor(math.log(2) / 2)
    )  # (ln 2 + 0) / 2
    net = build_net("soft", V).eval()
    features, tokens = random_batch(net, batch=2, steps=5, vocab_size=V)
    inputs, targets = shift_inputs(tokens)
    net.decoder.entropy_c = 0.5
    out = net.decoder(features, inputs)
    terms = caption_loss(out, targets, net.decoder)
    token_mask = (targets != 0).float()
    torch.testing.assert_close(terms.attention_reg, 0.5 * attention_entropy(out.alphas, token_mask))
    before = attention_entropy(out.alphas, token_mask).item()
    terms.attention_reg.backward()  # the penalty alone: one descent step lowers the entropy
    with torch.no_grad():
        for p in net.decoder.parameters():
            if p.grad is not None:
                p -= 0.5 * p.grad
    assert attention_entropy(net.decoder(features, inputs).alphas, token_mask).item() < before
    with pytest.raises(ValueError, match="entropy_c=-1 must be >= 0"):
        LSTMDecoder(partial(AdditiveAttention, attention_dim=4), vocab_size=V, feature_dim=8, entropy_c=-1)
