"""Horizontal flips that keep the captions true: the mirror image of a training photo, with "left" and
"right" swapped in its captions.

A mirrored photo of "a man holds a cup in his left hand" shows the cup in his right hand; training on the
mirror with the old caption teaches the model that the words mean nothing. So a flip swaps the side words
(``swap_sides``), as the mirror swaps the sides. Words with no side meaning are kept: "right" as an
intensifier ("right behind the dog", "right in front of"), "left" as the past of "to leave" ("the bag was left
on the bench", "the others have left"). The rules below were read off Flickr8k's 40,000 captions, of which
~0.4% name a side (tests/data/test_mirror.py holds the cases).

``MirroredSource`` is a training split's mirror image as a caption source of its own: its images are the
base images mirrored, its captions swapped, its image ids the base's (the same photo). Being a source, it
goes through every path a source goes through, the feature cache included: a frozen encoder's features of
the mirrored images are computed once, under keys of their own (``captioning.data.features.image_key``),
so flipping costs no encoder time per step (``CaptionDataModule(train_flip=True)`` draws, per training
item, the image or its mirror with probability 1/2 each).
"""

from __future__ import annotations

import re

from PIL import Image, ImageOps

from captioning.data.sources import SourceView


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Side words and their mirror words (lower case; the match keeps the original's capitalisation).
SIDE_WORDS = {
    "left": "right",
    "right": "left",
    "leftmost": "rightmost",
    "rightmost": "leftmost",
    "lefthand": "righthand",
    "righthand": "lefthand",
    "lefthanded": "righthanded",
    "righthanded": "lefthanded",
}
# "right" before these words is an intensifier ("right behind", "right in front of"), not a side; after a
# word of _SIDE_BEFORE it is a side whatever follows ("to the right in the picture"), see _is_side.
_RIGHT_INTENSIFIED = _words(
    "above across after against ahead alongside along around at away before behind below beneath "
    "beside between by down here in inside into near next now off on onto out outside over past there "
    "through to toward towards under underneath up where"
)
# After these a side word names a side whatever follows it ("the right", "his left", "to the left", "the
# top left"); a caption's first word is read in _is_side ("Left of the tree ...").
_SIDE_BEFORE = _words(
    "a the his her its their my your our far upper lower top bottom center centre middle to on from "
    "at toward towards"
)
# "left" is a side after these (turning, looking, leaning that way) ...
_LEFT_MOTION = _words(
    "turn turns turned turning look looks looked looking lean leans leaning face faces facing head "
    "heads heading go goes going move moves moving veer veers veering swerve swerves swerving jump "
    "jumps jumping point points pointing glance glances glancing steer steers steering and or"
)
# ... or before these ("his padded left arm", "a left turn"); anywhere else it is the verb "to leave"
# ("a bag left on the bench", "the water left behind", "only three pieces left").
_SIDE_NOUNS = _words(
    "hand hands arm arms leg legs foot feet side sides eye eyes ear ears shoulder shoulders knee "
    "knees wrist wrists elbow elbows ankle ankles cheek fist glove shoe boot sleeve pocket lane lanes "
    "turn turns corner field wing edge half one ones"
)
_LEFT_VERB_BEFORE = _words("alone behind by over unattended")

_WORD = re.compile(r"[A-Za-z]+")
_QUOTED = re.compile(r'"[^"]*"')  # what a sign says: a mirror does not change its words


def _is_side(word: str, before: str, after: str) -> bool:
    """Whether ``word`` (lower case, a key of SIDE_WORDS) names a side, given its neighbouring words
    (lower case; "" at the caption's ends)."""
    if word not in ("left", "right") or before in _SIDE_BEFORE or after in _SIDE_NOUNS:
        return True
    if word == "right":
        return after not in _RIGHT_INTENSIFIED
    if before == "":  # "Left of the tree ...", unless "Left behind ..."
        return after not in _LEFT_VERB_BEFORE
    return before in _LEFT_MOTION


def _same_case(word: str, like: str) -> str:
    if like.isupper() and len(like) > 1:
        return word.upper()
    return word.capitalize() if like[:1].isupper() else word


def swap_sides(caption: str) -> str:
    """``caption`` as it reads for the mirror image: side words swapped (left <-> right, leftmost <->
    rightmost, ...), everything else (spacing, punctuation, case) as it was. Quoted words are what a sign
    says ('the words " Look Right " painted on a street'): a mirror does not change them."""
    matches = list(_WORD.finditer(caption))
    words = [m.group().lower() for m in matches]
    quoted = [range(q.start(), q.end()) for q in _QUOTED.finditer(caption)]
    parts, end = [], 0
    for n, match in enumerate(matches):
        word = words[n]
        if word not in SIDE_WORDS or any(match.start() in span for span in quoted):
            continue
        before = words[n - 1] if n else ""
        after = words[n + 1] if n + 1 < len(words) else ""
        if _is_side(word, before, after):
            parts += [caption[end : match.start()], _same_case(SIDE_WORDS[word], match.group())]
            end = match.end()
    return "".join(parts) + caption[end:]


class MirroredSource(SourceView):
    """``base`` seen in a mirror: image i mirrored left to right, its captions through ``swap_sides``.
    The vocabulary is the base's (a swap only trades side words)."""

    mark = "mirrored"

    def image(self, i: int) -> Image.Image:
        return ImageOps.mirror(self.base.image(i))

    def captions(self, i: int) -> tuple[str, ...]:
        return tuple(swap_sides(c) for c in self.base.captions(i))
