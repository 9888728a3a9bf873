"""The failure-mode rules of scripts/failure_modes.py on hand-made captions and references (no model, no data)."""

from experiments import failure_modes as fm

W = fm.words


def refs(*texts: str) -> list[set[str]]:
    return [W(t) for t in texts]


def test_words_lowercases_and_drops_punctuation():
    assert W("A Man , in a T-shirt .") == {"a", "man", "in", "t", "shirt"}


def test_gender_flags_man_when_two_references_say_woman_and_none_man():
    theirs = refs("a woman sits", "a girl smiles", "a person sits", "someone sits", "a person")
    assert fm.wrong_gender(W("a man sits"), theirs)
    assert fm.wrong_gender(W("a woman sits"), refs("a man", "two boys", "a guy", "a person", "a kid"))


def test_gender_needs_two_references_of_the_other_gender():
    assert not fm.wrong_gender(
        W("a man sits"), refs("a woman sits", "a person", "a person", "a kid", "a kid")
    )


def test_gender_not_flagged_when_one_reference_uses_the_captions_gender():
    theirs = refs("a woman sits", "a lady sits", "a man sits", "a person", "a person")
    assert not fm.wrong_gender(W("a man sits"), theirs)


def test_gender_not_flagged_without_a_gendered_word():
    assert not fm.wrong_gender(
        W("a person sits"), refs("a woman", "a woman", "a woman", "a woman", "a woman")
    )


def test_colour_flags_a_colour_no_reference_uses():
    theirs = refs("a black dog runs .", "a dog runs", "a dog", "a dog", "a dog")
    assert fm.wrong_colour(W("a black and white dog runs"), theirs)
    assert not fm.wrong_colour(W("a black dog runs"), theirs)
    assert not fm.wrong_colour(W("a dog runs"), theirs)


def test_colour_counts_a_colour_from_any_reference():
    assert not fm.wrong_colour(W("a red car"), refs("a car", "a car", "a car", "a car", "a Red car ."))


def test_count_flags_a_number_no_reference_uses():
    theirs = refs("Four children are playing .", "kids play", "children", "kids", "kids")
    assert fm.wrong_count(W("two children are playing"), theirs)
    assert not fm.wrong_count(W("four children are playing"), theirs)
    assert not fm.wrong_count(W("children are playing"), theirs)


def test_count_ignores_vague_group_words():
    # "a group of" and "several" are not counts in these cards' rule (the finetune card used a wider list).
    assert not fm.wrong_count(W("a group of people"), refs("people", "people", "people", "people", "people"))


def test_dog_flags_a_dog_no_reference_mentions():
    theirs = refs("a boy kicks a ball", "a boy", "a kid", "a child", "a soccer player")
    assert fm.unseen_dog(W("a white dog is playing with a ball"), theirs)
    assert not fm.unseen_dog(W("a boy is playing with a ball"), theirs)


def test_dog_not_flagged_when_a_reference_sees_a_dog_or_dogs():
    assert not fm.unseen_dog(
        W("a dog runs"), refs("two dogs play", "animals", "animals", "animals", "animals")
    )
    assert not fm.unseen_dog(
        W("a dog runs"), refs("a puppy runs", "animals", "animals", "animals", "animals")
    )


def test_classify_keeps_dev_list_order_and_markdown_uses_the_first_two():
    captions = {"b.jpg": "a man sits", "a.jpg": "a man stands", "c.jpg": "a man walks"}
    women = ["A woman sits .", "a woman", "a girl", "a person", "a person"]
    references = {name: women for name in captions}
    flagged = fm.classify(captions, references)
    assert flagged["gender"] == ["b.jpg", "a.jpg", "c.jpg"] and flagged["dog"] == []
    block = fm.markdown(captions, references, flagged)
    assert "**3 distinct captions for 3 photos**" in block
    assert ": 3 of 3 photos." in block
    assert '`b.jpg`: "a man sits" — reference: "A woman sits ."' in block and "`c.jpg`" not in block
