import pytest
import torch

from captioning.decoding import beam_search, greedy
from captioning.models.decoders.base import Decoder

from conftest import DECODERS
from helpers import build_net, random_batch

V = 12


def sequence_log_prob(decoder, features, tokens):
    """Re-score generated ids (B, T) with teacher forcing: Σ log p over tokens up to <end>."""
    start = torch.ones(tokens.shape[0], 1, dtype=torch.long)
    inputs = torch.cat([start, tokens[:, :-1].clamp_min(0)], 1)
    logp = (
        torch.log_softmax(decoder(features, inputs).logits, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    )
    return (logp * (tokens != 0)).sum(1)


@pytest.mark.parametrize("decoder", DECODERS)
def test_beam_of_one_equals_greedy(decoder):
    net = build_net(decoder, V, seed=1).eval()
    features, _ = random_batch(net, batch=4, vocab_size=V)
    g = greedy(net.decoder, features, max_length=8)
    b = beam_search(net.decoder, features, beam_size=1, max_length=8)
    assert torch.equal(g.tokens, b.tokens)
    torch.testing.assert_close(g.log_prob, b.log_prob)
    torch.testing.assert_close(g.attention, b.attention)


@pytest.mark.parametrize("decoder", DECODERS)
def test_beam_finds_at_least_greedy_log_prob_and_scores_are_exact(decoder):
    net = build_net(decoder, V, seed=2).eval()
    features, _ = random_batch(net, batch=6, vocab_size=V, seed=3)
    g = greedy(net.decoder, features, max_length=8)
    b = beam_search(net.decoder, features, beam_size=4, max_length=8)
    assert torch.all(b.log_prob >= g.log_prob - 1e-5)
    with torch.no_grad():  # the reported log-probabilities are those of the returned sequences
        torch.testing.assert_close(
            sequence_log_prob(net.decoder, features, b.tokens), b.log_prob, atol=1e-4, rtol=0
        )
        torch.testing.assert_close(
            sequence_log_prob(net.decoder, features, g.tokens), g.log_prob, atol=1e-4, rtol=0
        )


def test_batched_beam_equals_one_image_at_a_time():
    net = build_net("soft", V, seed=4).eval()
    features, _ = random_batch(net, batch=5, vocab_size=V, seed=5)
    batched = beam_search(net.decoder, features, beam_size=3, max_length=8)
    for i in range(5):
        single = beam_search(net.decoder, features[i : i + 1], beam_size=3, max_length=8)
        n = single.tokens.shape[1]
        assert torch.equal(batched.tokens[i, :n], single.tokens[0])
        torch.testing.assert_close(batched.log_prob[i], single.log_prob[0])


class NeverEnds(Decoder):
    """A decoder whose best word is never <end>: decoding must stop at max_length."""

    vocab_size, feature_dim = 6, 2

    def init_state(self, features, mask=None):
        return {"t": torch.zeros(features.shape[0])}

    def step(self, tokens, state):
        logits = torch.full((tokens.shape[0], self.vocab_size), -5.0)
        logits[:, 4] = 0.0
        logits[:, 5] = -1.0
        logits[:, 2] = -20.0  # <end> is very unlikely
        return logits, torch.full((tokens.shape[0], 1), 1.0), {"t": state["t"] + 1}


@pytest.mark.parametrize("beam", [1, 3])
def test_decoding_terminates_when_end_is_never_emitted(beam):
    features = torch.zeros(2, 1, 2)
    out = (
        beam_search(NeverEnds(), features, beam_size=beam, max_length=7)
        if beam > 1
        else greedy(NeverEnds(), features, max_length=7)
    )
    assert out.tokens.shape == (2, 7) and torch.all(out.lengths == 7)
    assert torch.all(out.tokens[:, 0] == 4)


def test_length_penalty_prefers_longer_finished_captions():
    net = build_net("soft", V, seed=6).eval()
    features, _ = random_batch(net, batch=6, vocab_size=V, seed=7)
    plain = beam_search(net.decoder, features, beam_size=4, max_length=8, length_penalty=0.0)
    normed = beam_search(net.decoder, features, beam_size=4, max_length=8, length_penalty=1.0)
    assert torch.all(normed.lengths >= plain.lengths)
    torch.testing.assert_close(normed.score, normed.log_prob / normed.lengths.float())


def test_beam_size_zero_is_rejected():
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(NeverEnds(), torch.zeros(1, 1, 2), beam_size=0)
