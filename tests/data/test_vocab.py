import json

import pytest

from captioning.data.tokenize import tokenize
from captioning.data.vocab import PAD, SPECIALS, Vocab


def test_tokenize_lowercases_and_drops_punctuation():
    assert tokenize("A Dog's ball, in the  PARK.") == ["a", "dog's", "ball", "in", "the", "park"]
    assert tokenize("Hi!", keep_punctuation=True) == ["hi", "!"]
    assert tokenize(" ... ") == []


def test_vocab_build_min_count_and_order():
    caps = [["a", "dog"], ["a", "cat"], ["a", "dog", "runs"]]
    vocab = Vocab.build(caps, min_count=2)
    assert vocab.itos == [*SPECIALS, "a", "dog"]  # by count, then alphabetically
    assert vocab.encode(["a", "cat"]) == [1, 4, 3, 2]  # <start> a <unk> <end>


def test_vocab_round_trip_through_json():
    vocab = Vocab.build([["a", "red", "circle"], ["a", "blue", "square"]])
    restored = Vocab.from_dict(json.loads(json.dumps(vocab.to_dict())))
    assert restored == vocab
    ids = restored.encode(["a", "blue", "circle"])
    assert restored.decode(ids + [0, 0]) == ["a", "blue", "circle"]


def test_decode_stops_at_end_and_skips_specials():
    vocab = Vocab.build([["x", "y"]])
    assert vocab.decode([1, vocab.stoi["x"], 2, vocab.stoi["y"]]) == ["x"]


def test_bad_vocab_data_is_a_clear_error():
    with pytest.raises(ValueError, match="must start with"):
        Vocab(["a", PAD])
    with pytest.raises(ValueError, match="itos"):
        Vocab.from_dict({"words": []})
