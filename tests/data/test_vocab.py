import json

import pytest

from captioning.data.tokenize import tokenize
from captioning.data.vocab import PAD, SPECIALS, Vocab


def test_tokenize_lowercases_and_drops_punctuation():
    assert tokenize("A Dog's ball, in the  PARK.") == ["a", "dog's", "ball", "in", "the", "park"]
    assert tokenize("Hi!", keep_punctuation=True) == ["hi", "!"]
    assert tokenize(" ... ") == []


def test_tokenize_keeps_words_of_any_script_whole():
    # Accented letters are word characters, not tokens of their own ("läuft", not "l ä uft").
    assert tokenize("Ein Mädchen läuft über die Straße.") == [
        "ein",
        "mädchen",
        "läuft",
        "über",
        "die",
        "straße",
    ]
    assert tokenize("Une fête à l'été") == ["une", "fête", "à", "l'été"]
    # A combining accent (NFD) is the composed letter; a typographic apostrophe is the ASCII one.
    assert tokenize("Ma\u0308dchen") == ["mädchen"]
    assert tokenize("A man’s dog") == ["a", "man's", "dog"]
    assert tokenize("snake_case, x!", keep_punctuation=True) == ["snake", "_", "case", ",", "x", "!"]


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
