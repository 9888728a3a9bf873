"""How two vocabularies differ is said in words (captioning.data.vocab.vocabulary_difference)."""

from __future__ import annotations

from captioning.data.vocab import vocabulary_difference


def test_a_vocabulary_in_another_order_is_said_so() -> None:
    words = ["<pad>", "<start>", "<end>", "<unk>", "a", "dog", "cat"]
    swapped = [*words[:5], "cat", "dog"]
    assert vocabulary_difference(swapped, words) == (
        "the same 7 words in another order, first apart at id 5 ('cat' there, 'dog' here)"
    )
    assert vocabulary_difference(words[:6], words) == (
        "6 words against this run's 7, first apart at id 6 (nothing there, 'cat' here)"
    )
