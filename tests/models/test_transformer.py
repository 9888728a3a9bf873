"""The Transformer decoder: fused attention against a naive reference, causality, the KV cache."""

import math

import pytest
import torch

from captioning.decoding import beam_search, greedy
from captioning.models.attention.multihead import MultiHeadSDPA, attention_weights, fused_attention
from captioning.models.decoders.transformer import TransformerDecoder
from captioning.models.position import (
    alibi_bias,
    alibi_slopes,
    sinusoidal_1d,
    sinusoidal_2d,
    square_grid_side,
)

from support.helpers import build_net, random_batch

V = 12


def naive_attention(q, k, v, mask=None, causal=False, bias=None):
    """softmax(Q Kᵀ / √d + bias) V written out, masked keys at -inf: (B, h, T, d) -> out, weights."""
    scores = torch.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
    if causal:
        t, s = scores.shape[-2:]
        later = torch.arange(s)[None, :] > torch.arange(t)[:, None]  # (T, S) key after query
        scores = scores.masked_fill(later, float("-inf"))
    weights = torch.softmax(scores, -1)
    return torch.einsum("bhts,bhsd->bhtd", weights, v), weights


def decoder(use_cache=True, seed=0, **kwargs):
    torch.manual_seed(seed)
    args = {
        "vocab_size": V,
        "feature_dim": 10,
        "embed_dim": 16,
        "ff_dim": 24,
        "num_layers": 2,
        "num_heads": 4,
    }
    return TransformerDecoder(**{**args, **kwargs}, use_cache=use_cache).eval()


def grid(batch=3, side=3, seed=0):
    return torch.randn(batch, side * side, 10, generator=torch.Generator().manual_seed(seed))  # (B, L, F)


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_fused_attention_equals_the_naive_reference(masked, causal):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 5, 8, generator=g) for _ in range(3))  # (B, h, T=S, d)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]]) if masked else None
    if masked and causal:
        mask[1] = True  # causal + padding: keep every query with at least one key
        mask[1, 4] = False
    expected, expected_w = naive_attention(q, k, v, mask, causal)
    torch.testing.assert_close(fused_attention(q, k, v, mask, causal), expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(attention_weights(q, k, mask, causal), expected_w, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("masked", [False, True])
def test_fused_attention_with_an_alibi_bias_equals_the_naive_reference(masked):
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 4, 5, 8, generator=g) for _ in range(3))  # (B, h, T=S, d)
    mask = torch.tensor([[True] * 5, [True, True, True, True, False]]) if masked else None
    bias = alibi_bias(4, 5, 0)  # (h, T, S), -inf above the diagonal
    expected, expected_w = naive_attention(q, k, v, mask, causal=True, bias=bias)
    torch.testing.assert_close(
        fused_attention(q, k, v, mask, True, bias=bias), expected, atol=1e-6, rtol=1e-5
    )
    torch.testing.assert_close(attention_weights(q, k, mask, True, bias), expected_w, atol=1e-6, rtol=1e-5)


def test_alibi_bias_is_minus_slope_times_distance_and_causal():
    slopes = alibi_slopes(4)
    torch.testing.assert_close(slopes, torch.tensor([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]))  # 2^(-8h/H)
    torch.testing.assert_close(alibi_slopes(4, base=4.0), torch.tensor([0.5, 0.25, 0.125, 0.0625]))
    torch.testing.assert_close(alibi_bias(4, 3, 0, base=4.0)[0, 2, 0], torch.tensor(-2 * 0.5))
    with pytest.raises(ValueError, match="alibi_base=0"):
        decoder(alibi=True, alibi_base=0.0)
    full = alibi_bias(4, 6, 0)  # (h, 6, 6): the whole prefix at once
    assert full.shape == (4, 6, 6)
    assert full[0, 5, 1].item() == -4 * 2.0**-2 and full[3, 2, 2].item() == 0.0
    assert torch.isinf(full[:, 2, 3:]).all() and not torch.isinf(full[:, 2, :3]).any()
    # one new query after 5 cached tokens is the last row of the full bias: the cache sees the same scores
    torch.testing.assert_close(alibi_bias(4, 1, 5), full[:, 5:6])


def test_module_weights_path_gives_the_same_output_and_the_weights_it_applies():
    torch.manual_seed(0)
    mha = MultiHeadSDPA(embed_dim=16, num_heads=4).eval()
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[0, 4:] = False
    fused, none = mha(x, memory, mask)
    out, weights = mha(x, memory, mask, need_weights=True)
    assert none is None and weights.shape == (2, 4, 5, 7)
    assert torch.equal(out, fused)  # asking for weights never changes the output
    assert torch.all(weights[0, :, :, 4:] == 0)
    # the output is W_o [weights · V] with V from the packed projection, heads concatenated
    _, v = mha.project_kv(memory)
    heads = weights @ v  # (B, h, T, d)
    manual = mha.out_proj(heads.transpose(1, 2).reshape(2, 5, 16))
    torch.testing.assert_close(out, manual, atol=1e-6, rtol=1e-5)
    # packed projection: self-attention's single matmul equals the separate q and kv projections
    q, k_self, v_self = mha.project_qkv(memory)
    k2, v2 = mha.project_kv(memory)
    torch.testing.assert_close(q, mha.project_q(memory))
    assert torch.equal(k_self, k2) and torch.equal(v_self, v2)


@pytest.mark.parametrize("alibi", [False, True])
def test_a_later_token_never_changes_earlier_logits(alibi):
    dec = decoder(alibi=alibi)
    features = grid()
    tokens = torch.randint(3, V, (3, 7), generator=torch.Generator().manual_seed(1))
    changed = tokens.clone()
    changed[:, 4:] = (tokens[:, 4:] + 1) % V
    a, b = dec(features, tokens).logits, dec(features, changed).logits
    torch.testing.assert_close(a[:, :4], b[:, :4], atol=1e-6, rtol=1e-6)
    assert (a[:, 4:] - b[:, 4:]).abs().max() > 1e-3  # and the later positions do see it
    if alibi:  # the bias is applied: the same weights without it give other logits from the second token on
        plain = decoder(alibi=False)(features, tokens).logits
        torch.testing.assert_close(a[:, 0], plain[:, 0], atol=1e-6, rtol=1e-6)  # one key: nothing to bias
        assert (a[:, 1:] - plain[:, 1:]).abs().max() > 1e-3


@pytest.mark.parametrize(
    "options", [{}, {"memory_layers": 1}, {"alibi": True}, {"alibi": True, "token_positions": False}]
)
@pytest.mark.parametrize("masked", [False, True])
def test_cached_steps_equal_full_recomputation_at_every_step(masked, options):
    cached = decoder(use_cache=True, **options)
    full = decoder(use_cache=False, **options)
    features = grid()
    mask = torch.ones(3, 9, dtype=torch.bool)
    if masked:
        mask[0, 5:] = False
        mask[2, :2] = False
    tokens = torch.randint(3, V, (3, 8), generator=torch.Generator().manual_seed(2))
    tokens[:, 0] = 1
    teacher = cached(features, tokens, mask)
    s_cache, s_full = cached.init_state(features, mask), full.init_state(features, mask)
    with torch.no_grad():
        for t in range(tokens.shape[1]):
            l_cache, a_cache, s_cache = cached.step(tokens[:, t], s_cache)
            l_full, a_full, s_full = full.step(tokens[:, t], s_full)
            torch.testing.assert_close(l_cache, l_full, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(a_cache, a_full, atol=1e-6, rtol=1e-5)
            torch.testing.assert_close(l_cache, teacher.logits[:, t], atol=1e-5, rtol=1e-5)
            assert s_cache["self_k0"].shape == (3, 4, t + 1, 4)  # the cache grew by one position
            assert torch.all(a_cache[~mask] == 0)  # masked locations get no attention


def test_without_token_positions_the_embedding_is_the_scaled_token_vector_alone():
    with_pe, without = decoder(), decoder(token_positions=False)
    tokens = torch.tensor([[1, 5, 5, 5]])
    e = without.embed(tokens)  # (1, 4, D): eval mode, no dropout
    torch.testing.assert_close(e, without.embedding(tokens) * math.sqrt(16))
    assert torch.equal(e[0, 1], e[0, 3])  # the same word at two places: one vector
    # with the sinusoids the same word differs by exactly P1d(3) - P1d(1)
    p = with_pe.embed(tokens) - e
    torch.testing.assert_close(p[0], sinusoidal_1d(torch.arange(4), 16))


def test_memory_layer_equals_torch_pre_ln_encoder_layer():
    """MemoryLayer is PyTorch's own encoder layer (norm_first, GELU) with the same weights, padding
    included; and a padded cell changes no valid cell's memory."""
    from captioning.models.decoders.transformer import MemoryLayer

    torch.manual_seed(0)
    ours = MemoryLayer(dim=16, num_heads=4, ff_dim=24, dropout=0.0).eval()
    ref = torch.nn.TransformerEncoderLayer(
        16, 4, dim_feedforward=24, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
    ).eval()
    with torch.no_grad():
        ref.self_attn.in_proj_weight.copy_(ours.self_attn.in_proj.weight)
        ref.self_attn.in_proj_bias.copy_(ours.self_attn.in_proj.bias)
        ref.self_attn.out_proj.weight.copy_(ours.self_attn.out_proj.weight)
        ref.self_attn.out_proj.bias.copy_(ours.self_attn.out_proj.bias)
        for mine, theirs in ((ours.norm_self, ref.norm1), (ours.norm_ff, ref.norm2)):
            theirs.load_state_dict(mine.state_dict())
        ref.linear1.load_state_dict(ours.ff[0].state_dict())
        ref.linear2.load_state_dict(ours.ff[3].state_dict())
    x = torch.randn(2, 9, 16)  # (B, L, D)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, 6:] = False  # 3 padded cells in the second image
    with torch.no_grad():
        torch.testing.assert_close(ours(x, None), ref(x), atol=1e-5, rtol=1e-5)
        expected = ref(x, src_key_padding_mask=~mask)
        got = ours(x, mask)
        torch.testing.assert_close(got[mask], expected[mask], atol=1e-5, rtol=1e-5)
        moved = x.clone()
        moved[1, 6:] += 5.0  # whatever the padding holds
        torch.testing.assert_close(ours(moved, mask)[mask], got[mask], atol=1e-6, rtol=1e-6)


def test_memory_layers_make_every_cell_see_the_others():
    """memory_layers = 0 reads each cell on its own; with a memory layer, changing one cell changes the
    memory of the others (and the option is rejected when negative)."""
    features = grid(batch=1)
    changed = features.clone()
    changed[0, 0] += 1.0
    for layers, others_change in ((0, False), (1, True)):
        dec = decoder(memory_layers=layers)
        with torch.no_grad():
            delta = (dec.encode_memory(changed) - dec.encode_memory(features))[0, 1:].abs().max()
        assert (delta > 1e-4) == others_change
    with pytest.raises(ValueError, match="memory_layers=-1"):
        decoder(memory_layers=-1)


def test_beam_search_with_the_cache_equals_beam_search_without():
    cached, full = decoder(use_cache=True, seed=3), decoder(use_cache=False, seed=3)
    features = grid(batch=4, seed=4)
    for k in (1, 3):
        a = beam_search(cached, features, num_beams=k, max_new_tokens=9)
        b = beam_search(full, features, num_beams=k, max_new_tokens=9)
        assert torch.equal(a.tokens, b.tokens)
        torch.testing.assert_close(a.log_prob, b.log_prob, atol=1e-5, rtol=0)
        torch.testing.assert_close(a.attention, b.attention, atol=1e-5, rtol=0)
    assert torch.equal(
        greedy(cached, features, max_new_tokens=9).tokens, greedy(full, features, max_new_tokens=9).tokens
    )


def test_reordering_moves_the_growing_cache_and_never_copies_per_image_keys():
    dec = decoder()
    state = dec.expand_state(dec.init_state(grid(batch=2)), 2)  # 4 rows, beams of an image adjacent
    _, _, state = dec.step(torch.tensor([1, 1, 1, 1]), state)
    _, _, state = dec.step(torch.tensor([4, 5, 6, 7]), state)
    rows = torch.tensor([1, 1, 3, 2])
    moved = dec.reorder_state(state, rows)
    assert moved["cross_k0"] is state["cross_k0"] and moved["cross_v1"] is state["cross_v1"]
    assert torch.equal(moved["self_k1"], state["self_k1"][rows])
    assert torch.equal(moved["self_v0"], state["self_v0"][rows])


def test_attention_head_and_layer_options_select_the_weights():
    features = grid()
    tokens = torch.randint(3, V, (3, 5), generator=torch.Generator().manual_seed(5))
    mean = decoder(seed=6)(features, tokens).attention  # (B, T, L), last layer mean over heads
    per_head = [decoder(seed=6, attention_head=h)(features, tokens).attention for h in range(4)]
    torch.testing.assert_close(torch.stack(per_head).mean(0), mean)
    first = decoder(seed=6, attention_layer=0)(features, tokens)
    assert not torch.allclose(first.attention, mean)  # a different layer's attention
    torch.testing.assert_close(first.logits, decoder(seed=6)(features, tokens).logits)  # outputs unchanged
    with pytest.raises(ValueError, match="attention_head=4"):
        decoder(attention_head=4)


def test_tied_output_layer_and_training_attention_carries_no_gradient():
    dec = decoder()
    assert dec.out.weight is dec.embedding.weight
    assert decoder(tie_embeddings=False).out.weight is not decoder(tie_embeddings=False).embedding.weight
    out = dec.train()(grid(), torch.randint(3, V, (3, 4)))
    assert out.logits.requires_grad and not out.alphas.requires_grad  # eq. 14 stays inert


def test_bf16_autocast_runs_the_module_unchanged():
    dec = decoder(seed=7)
    features = grid(seed=8)
    tokens = torch.randint(3, V, (3, 6), generator=torch.Generator().manual_seed(9))
    ref = dec(features, tokens).logits
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = dec(features, tokens).logits
        state = dec.init_state(features)
        logits, att, state = dec.step(tokens[:, 0], state)
        logits, att, state = dec.step(tokens[:, 1], state)
    assert low.dtype == torch.bfloat16 and state["self_k0"].dtype == torch.bfloat16
    torch.testing.assert_close(low.float(), ref, atol=0.1, rtol=0.05)
    torch.testing.assert_close(logits.float(), ref[:, 1], atol=0.1, rtol=0.05)
    torch.testing.assert_close(att.float().sum(-1), torch.ones(3), atol=1e-2, rtol=0)


def test_position_encodings():
    pe = sinusoidal_1d(torch.arange(4), 8)  # (4, 8)
    torch.testing.assert_close(pe[:, 0], torch.sin(torch.arange(4.0)))
    torch.testing.assert_close(pe[:, 1], torch.cos(torch.arange(4.0)))
    grid2d = sinusoidal_2d(2, 3, 8)  # (6, 8): rows in the first half, columns in the second
    assert grid2d.shape == (6, 8)
    torch.testing.assert_close(grid2d[3, :4], sinusoidal_1d(torch.tensor(1), 4))  # row 1
    torch.testing.assert_close(grid2d[3, 4:], sinusoidal_1d(torch.tensor(0), 4))  # column 0
    assert square_grid_side(36) == 6
    with pytest.raises(ValueError, match="L=10"):
        square_grid_side(10)


def test_config_builds_the_transformer_with_tiny_sizes():
    net = build_net("transformer", V).eval()
    features, tokens = random_batch(net, batch=2, steps=4, vocab_size=V)
    assert isinstance(net.decoder, TransformerDecoder) and net.decoder.embed_dim == 16
    assert net.decoder(features, tokens).logits.shape == (2, 4, V)
