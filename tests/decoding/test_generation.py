"""HF-style decoding options: each one's defining property, for every decoder, through ``generate``."""

import pytest
import torch

from captioning.data.vocab import Vocab
from captioning.decoding import GenerationConfig, beam_search, generate, greedy
from captioning.decoding.processors import banned_ngram_mask, repetition_penalty, warp

from support import DECODERS
from support.helpers import build_net, random_batch

V = 12


def nets():
    return [pytest.param(d, id=d) for d in DECODERS]


def grams(row: list[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(row[i : i + n]) for i in range(len(row) - n + 1)]


@pytest.mark.parametrize("decoder", nets())
def test_n_best_first_is_beam_search_best_and_lists_are_sorted(decoder):
    net = build_net(decoder, V, seed=1).eval()
    features, _ = random_batch(net, batch=3, vocab_size=V, seed=2)
    best = beam_search(net.decoder, features, num_beams=4, max_new_tokens=8)
    nbest = generate(net.decoder, features, num_beams=4, num_return_sequences=3, max_new_tokens=8)
    assert nbest.tokens.shape[0] == 9 and nbest.num_return_sequences == 3
    for i in range(3):
        n = best.tokens.shape[1]
        assert torch.equal(nbest.tokens[3 * i, :n], best.tokens[i])  # the first of each list
        scores = nbest.score[3 * i : 3 * i + 3]
        assert torch.all(scores[:-1] >= scores[1:])  # best first


@pytest.mark.parametrize("decoder", nets())
@pytest.mark.parametrize(
    "options",
    [
        {"num_beams": 1},
        {"num_beams": 3, "length_penalty": 1.0},
        {"num_beams": 3, "num_return_sequences": 2},
        {"do_sample": True, "num_return_sequences": 2, "top_p": 0.9},
        {"num_beams": 2, "no_repeat_ngram_size": 2, "repetition_penalty": 1.5},
    ],
    ids=["greedy", "beam", "nbest", "sample", "blocking"],
)
def test_scores_are_the_sum_of_token_log_probs(decoder, options):
    net = build_net(decoder, V, seed=3).eval()
    features, _ = random_batch(net, batch=3, vocab_size=V, seed=4)
    out = generate(
        net.decoder, features, max_new_tokens=8, generator=torch.Generator().manual_seed(0), **options
    )
    live = out.tokens != Vocab.pad_id  # (N, T): tokens up to and including <end>
    torch.testing.assert_close(out.token_log_probs.sum(1), out.log_prob, atol=1e-4, rtol=0)
    assert torch.all(out.token_log_probs[~live] == 0) and torch.all(out.token_log_probs[live] <= 0)
    lp = options.get("length_penalty", 0.0)
    torch.testing.assert_close(out.score, out.log_prob / out.lengths.float() ** lp)


@pytest.mark.parametrize("decoder", nets())
def test_sampling_is_reproducible_with_a_seed_and_top_k_1_is_greedy(decoder):
    net = build_net(decoder, V, seed=5).eval()
    features, _ = random_batch(net, batch=4, vocab_size=V, seed=6)

    def sample(seed, **kw):
        return generate(net.decoder, features, do_sample=True, max_new_tokens=8,
                        generator=torch.Generator().manual_seed(seed), **kw)  # fmt: skip

    a, b, c = (
        sample(0, num_return_sequences=3),
        sample(0, num_return_sequences=3),
        sample(1, num_return_sequences=3),
    )
    assert torch.equal(a.tokens, b.tokens) and not torch.equal(a.tokens, c.tokens)
    g = greedy(net.decoder, features, max_new_tokens=8)
    k1 = sample(7, top_k=1)
    assert torch.equal(k1.tokens, g.tokens)
    torch.testing.assert_close(k1.log_prob, g.log_prob)


@pytest.mark.parametrize("decoder", nets())
@pytest.mark.parametrize("n", [1, 2, 3])
def test_no_repeated_ngram_when_blocking_is_on(decoder, n):
    net = build_net(decoder, 10, seed=8).eval()
    features, _ = random_batch(net, batch=6, vocab_size=10, seed=9)
    # No <end> (end_id=-1): every caption runs 7 tokens over 8 possible words, so blocking is feasible
    # for every n and an unblocked random model repeats itself.
    options = {"num_beams": 2, "max_new_tokens": 7, "end_id": -1}
    plain = generate(net.decoder, features, **options).tokens.tolist()
    blocked = generate(net.decoder, features, no_repeat_ngram_size=n, **options).tokens.tolist()
    for row in blocked:
        assert len(set(grams(row, n))) == len(grams(row, n)), row
    assert any(len(set(grams(r, n))) < len(grams(r, n)) for r in plain)  # else the test shows nothing


def test_ngram_mask_bans_exactly_the_completing_words():
    history = torch.tensor([[4, 5, 6, 4, 5], [4, 4, 4, 7, 8]])
    banned = banned_ngram_mask(history, 3, 10)
    assert banned[0].nonzero().flatten().tolist() == [6]  # "4 5" was followed by 6
    assert banned[1].nonzero().flatten().tolist() == []  # "7 8" never occurred before
    assert banned_ngram_mask(history, 1, 10)[1].nonzero().flatten().tolist() == [4, 7, 8]


def test_repetition_penalty_is_ctrl_as_hf_applies_it():
    logits = torch.tensor([[2.0, -1.0, 0.5, -3.0, 1.0]])
    history = torch.tensor([[1, 3, 4]])
    out = repetition_penalty(logits, history, 2.0)
    torch.testing.assert_close(out, torch.tensor([[2.0, -2.0, 0.5, -6.0, 0.5]]))
    assert torch.equal(repetition_penalty(logits, history, 1.0), logits)


def test_top_k_and_top_p_keep_the_right_words():
    logp = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))

    def keep(**kw):
        return (warp(logp, GenerationConfig(do_sample=True, **kw)) > float("-inf")).squeeze(0).tolist()

    assert keep(top_k=2) == [True, True, False, False]
    assert keep(top_p=0.8) == [True, True, False, False]  # 0.5 + 0.3 reaches 0.8
    assert keep(top_p=0.81) == [True, True, True, False]
    assert keep(top_p=0.1) == [True, False, False, False]  # never empty
    torch.testing.assert_close(warp(logp, GenerationConfig(do_sample=True, temperature=2.0)), logp / 2)


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"num_beams": 0}, "num_beams=0: expected an integer in [1, 64]"),
        ({"num_return_sequences": 3}, "num_return_sequences=3: expected at most num_beams=1"),
        ({"do_sample": True, "num_beams": 2}, "beam-search sampling is not offered"),
        ({"top_p": 0.0}, "top_p=0.0: expected a number in (0, 1]"),
        ({"temperature": -1.0}, "temperature=-1.0: expected a number in [1e-4, 100]"),
        ({"max_new_tokens": 0}, "max_new_tokens=0: expected an integer in [1, 1000]"),
        ({"beam": 2}, "unknown decoding option 'beam'"),
    ],
)
def test_bad_options_name_the_option_and_what_was_expected(options, fragment):
    with pytest.raises(ValueError) as info:
        GenerationConfig.from_dict(options)
    assert fragment in str(info.value)


def test_legacy_names_of_earlier_checkpoints_are_renamed():
    cfg = GenerationConfig.from_dict({"beam_size": 3, "max_length": 9, "length_penalty": 0.5})
    assert (cfg.num_beams, cfg.max_new_tokens, cfg.length_penalty) == (3, 9, 0.5)


def _unk_loving(decoder_name: str):
    """A net whose every step puts most of its mass on <unk> (its logit raised by 20)."""
    net = build_net(decoder_name, V, seed=11).eval()
    step = net.decoder.step

    def biased(*args, **kwargs):
        logits, *rest = step(*args, **kwargs)
        return (logits + 20.0 * (torch.arange(logits.shape[-1]) == Vocab.unk_id), *rest)

    net.decoder.step = biased
    return net


@pytest.mark.parametrize("decoder", nets())
@pytest.mark.parametrize(
    "options",
    [
        {"num_beams": 1},
        {"num_beams": 3, "num_return_sequences": 3},
        {"do_sample": True, "num_return_sequences": 4},
    ],
    ids=["greedy", "beam", "sample"],
)
def test_unk_is_never_generated_unless_allowed(decoder, options):
    net = _unk_loving(decoder)
    features, _ = random_batch(net, batch=3, vocab_size=V, seed=12)

    def run(**extra):
        return generate(net.decoder, features, max_new_tokens=6, generator=torch.Generator().manual_seed(0),
                        **options, **extra).tokens  # fmt: skip

    assert not (run() == Vocab.unk_id).any()
    assert not (run(allow_unk=False) == Vocab.unk_id).any()
    assert (run(allow_unk=True) == Vocab.unk_id).float().mean() > 0.5  # what the model wants, when allowed


def test_allow_unk_is_an_option_with_a_default_that_old_checkpoints_get():
    assert GenerationConfig().allow_unk is False
    assert GenerationConfig.from_dict({"num_beams": 5}).allow_unk is False  # a stored decoding without it
    assert GenerationConfig.from_dict({"allow_unk": True}).to_dict()["allow_unk"] is True
    with pytest.raises(ValueError, match="allow_unk='yes': expected true or false"):
        GenerationConfig(allow_unk="yes")
