"""scripts/ablate_words.py: each cut removes exactly the input path it names, and nothing stays patched."""

from __future__ import annotations

import importlib.util
import sys

import torch

from conftest import REPO
from corpus import build_module

sys.path.insert(0, str(REPO / "scripts"))  # the script imports its neighbour scene_accuracy
SPEC = importlib.util.spec_from_file_location("ablate_words", REPO / "scripts" / "ablate_words.py")
ablate = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(ablate)


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
