"""scripts/ablate_words.py: each cut removes exactly the input path it names, and nothing stays patched."""

from __future__ import annotations

import torch

from experiments import ablate_words as ablate

from support.corpus import build_module


def _decoder(name: str):
    return build_module(["a", "red", "circle"], [f"model/decoder={name}"]).net.decoder.eval()


def test_context_cuts_replace_the_context_by_a_cell_of_the_same_image_or_zeros() -> None:
    decoder = _decoder("hard_reinforce")
    torch.manual_seed(0)
    features = decoder.with_positions(torch.randn(2, 16, decoder.feature_dim))  # (B, L, D')
    state = decoder.init_state(torch.randn(2, 16, decoder.feature_dim))
    keys = decoder.attention.precompute(features)
    query = state["h"].repeat_interleave(3, 0)  # (B·K, H): 3 beams per image
    with torch.no_grad(), ablate.ablated(decoder, "random", False, torch.Generator().manual_seed(0)):
        out = decoder.attention(query, features, keys)
        for row in range(6):  # each row's context is one of *its own image's* cells
            assert any(torch.equal(out.context[row], features[row // 3, i]) for i in range(16))
    with torch.no_grad(), ablate.ablated(decoder, "zero", False, torch.Generator()):
        assert torch.count_nonzero(decoder.attention(query, features, keys).context) == 0
    assert not isinstance(decoder.attention, ablate.CutContext)  # restored after the block


def test_init_cut_takes_the_next_images_state_and_keeps_its_own_features() -> None:
    decoder = _decoder("soft")
    features = torch.randn(3, 16, decoder.feature_dim)
    plain = decoder.init_state(features)
    with ablate.ablated(decoder, None, True, torch.Generator()):
        cut = decoder.init_state(features)
    torch.testing.assert_close(cut["h"], plain["h"].roll(1, dims=0))
    torch.testing.assert_close(cut["features"], plain["features"])
    torch.testing.assert_close(decoder.init_state(features)["h"], plain["h"])  # restored


def test_a_cut_after_chosen_words_replaces_the_context_only_on_the_steps_that_follow_them() -> None:
    decoder = _decoder("soft")
    torch.manual_seed(0)
    features = torch.randn(3, 16, decoder.feature_dim)
    tokens = torch.tensor([5, 6, 5])  # rows 0 and 2 follow word 5: only they are cut
    plain = decoder.step(tokens, decoder.init_state(features))
    after = torch.tensor([5])
    with torch.no_grad(), ablate.ablated(decoder, "zero", False, torch.Generator(), after):
        cut = decoder.step(tokens, decoder.init_state(features))
    torch.testing.assert_close(cut[0][1], plain[0][1])  # row 1 read its own context: the same logits
    assert not torch.allclose(cut[0][0], plain[0][0]) and not torch.allclose(cut[0][2], plain[0][2])
    assert "step" not in vars(decoder) and not isinstance(decoder.attention, ablate.CutContext)  # restored
