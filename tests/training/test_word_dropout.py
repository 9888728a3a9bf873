"""Word dropout (captioning/training/word_dropout.py): teacher-forced inputs hidden as <unk> at rate p in
training only; <pad> and <start> never change."""

from __future__ import annotations

import pytest
import torch

from captioning.data.vocab import Vocab
from captioning.training.word_dropout import drop_words

from support.corpus import build_module

WORDS = ["a", "red", "circle", "square", "left", "of"]


def test_each_word_is_hidden_at_rate_p_and_pad_and_start_never():
    torch.manual_seed(0)
    tokens = torch.randint(4, 10, (400, 12))  # (B, T) words only
    tokens[:, 0] = Vocab.start_id
    tokens[:, 9:] = Vocab.pad_id  # padding after 8 words
    dropped = drop_words(tokens, 0.25, Vocab.unk_id, keep=(Vocab.pad_id, Vocab.start_id))
    words = tokens[:, 1:9]
    hidden = dropped[:, 1:9] == Vocab.unk_id
    assert torch.equal(dropped[:, 1:9][~hidden], words[~hidden])  # the rest kept as they were
    assert abs(hidden.float().mean().item() - 0.25) < 0.02  # 3,200 words: rate p within ~3 standard errors
    assert torch.equal(dropped[:, 0], tokens[:, 0]) and torch.equal(dropped[:, 9:], tokens[:, 9:])
    assert drop_words(tokens, 0.0, Vocab.unk_id, keep=()) is tokens  # p = 0: the inputs themselves


def _inputs_seen(module, stage: str) -> torch.Tensor:
    """The token ids the decoder reads in one ``shared_step`` of ``stage`` (its forward's second argument)."""
    seen = []
    hook = module.net.decoder.register_forward_pre_hook(lambda _, args: seen.append(args[1].clone()))
    tokens = torch.tensor([[Vocab.start_id, 4, 5, 6, 7, 8, 9, Vocab.end_id, Vocab.pad_id]] * 64)
    batch = {"tokens": tokens, "images": torch.rand(64, 3, 32, 32)}
    try:
        module.shared_step(batch, stage)
    finally:
        hook.remove()
    return seen[0]


def test_the_module_hides_words_in_training_only():
    module = build_module(WORDS, ["model.word_dropout=0.5"])
    module.log = lambda *a, **k: None  # outside a Trainer
    torch.manual_seed(1)
    train = _inputs_seen(module, "train")  # (64, 8): <start> w_1 .. w_6 <end>
    assert torch.equal(train[:, 0], torch.full((64,), Vocab.start_id))
    hidden = (train[:, 1:7] == Vocab.unk_id).float().mean().item()
    assert 0.4 < hidden < 0.6, hidden  # 384 words at p = 0.5
    val = _inputs_seen(module, "val")
    assert not (val == Vocab.unk_id).any()  # validation reads every word


@pytest.mark.parametrize("p", [-0.1, 1.0])
def test_a_rate_outside_0_1_is_refused_naming_the_key(p):
    with pytest.raises(Exception, match=rf"model.word_dropout={p}, expected 0 <= p < 1"):
        build_module(WORDS, [f"model.word_dropout={p}"])
