"""Object accuracy on synthetic scenes: does the caption name every object with the right size, colour,
shape and position? BLEU's companion that cannot be fooled by fluent wrong bindings.

A caption is parsed into *mentions* (size, colour, shape, position), one per shape word, whatever the
template: "a big red circle in the top left", "the top left has a big red circle", "... on the top left",
"... at the center", "there is ...", "one ...", joined by "and" / "with" / commas. A scene object is
named *right* when some mention agrees on all four attributes; the matching is one-to-one and
order-free. A mention that agrees with no object is an *extra* object, one the scene does not have (a
wrong binding such as "small blue square" for a small blue circle counts there too).

    object_accuracy   right objects / scene objects, over all images
    extra_per_image   extra mentions per image
    attribute_accuracy  per attribute, over scene objects: agreement with the object's closest mention
    misplaced_per_image mentions whose size, colour and shape are a scene object's but whose position is
                        not where any such object is
    borrowed_positions  of those, the fraction whose position is another scene object's: the objects are
                        named and the places are named, but bound to each other wrongly (a swap)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from captioning.metrics.scenes import SceneMetric
from captioning.scenes import COLORS, POSITION_WORDS, POSITIONS, SHAPES, SIZES, SceneObject, scene_object

TWO_WORD = {tuple(p.split()) for p in POSITIONS if " " in p}  # ("top", "left") ...
CLAUSE_BREAKS = frozenset({"and", "with", ",", ";", "."})
ATTRIBUTES = ("size", "color", "shape", "position")


@dataclass(frozen=True)
class Mention:
    size: str | None
    color: str | None
    shape: str
    position: str | None

    def agreement(self, obj: SceneObject | Mapping[str, Any]) -> int:
        obj = scene_object(obj, ATTRIBUTES)
        return sum(getattr(self, a) == getattr(obj, a) for a in ATTRIBUTES)


def _positions(words: Sequence[str]) -> list[tuple[int, str]]:
    """(index, position phrase) in a clause: "top left" as one phrase, else single position words."""
    found, i = [], 0
    while i < len(words):
        if i + 1 < len(words) and (words[i], words[i + 1]) in TWO_WORD:
            found.append((i, f"{words[i]} {words[i + 1]}"))
            i += 2
        elif words[i] in POSITION_WORDS:
            found.append((i, words[i]))
            i += 1
        else:
            i += 1
    return found


def parse_mentions(caption: str | Sequence[str]) -> list[Mention]:
    """Every object the caption names, with the attributes it gives it (None where it gives none)."""
    words = caption.split() if isinstance(caption, str) else list(caption)
    clauses: list[list[str]] = [[]]
    for word in words:
        if word in CLAUSE_BREAKS:
            clauses.append([])
        else:
            clauses[-1].append(word)
    mentions = []
    for clause in clauses:
        positions = _positions(clause)
        shapes = [i for i, w in enumerate(clause) if w in SHAPES]
        for k, i in enumerate(shapes):
            start = shapes[k - 1] + 1 if k else 0  # attributes between the previous shape and this one
            before = clause[start:i]
            size = next((w for w in reversed(before) if w in SIZES), None)
            color = next((w for w in reversed(before) if w in COLORS), None)
            # The position phrase nearest the shape word: after it ("in the top left") or before it
            # ("the top left has a ..."); several shapes in a clause each take their nearest one.
            position = min(positions, key=lambda p: abs(p[0] - i), default=(None, None))[1]
            mentions.append(Mention(size, color, clause[i], position))
    return mentions


def score_caption(caption: str | Sequence[str], objects: Sequence[Any]) -> dict[str, Any]:
    """Right objects, extra mentions and per-attribute agreement of one caption against its scene."""
    mentions = parse_mentions(caption)
    scene = [scene_object(o, ATTRIBUTES) for o in objects]
    unused = list(range(len(mentions)))
    right = 0
    for obj in scene:  # exact matches are interchangeable, so a greedy one-to-one matching is maximal
        hit = next((m for m in unused if mentions[m].agreement(obj) == 4), None)
        if hit is not None:
            unused.remove(hit)
            right += 1
    extra = len(unused)
    misplaced = borrowed = 0
    for m in mentions:
        looks = [o for o in scene if (o.size, o.color, o.shape) == (m.size, m.color, m.shape)]
        if looks and m.position not in {o.position for o in looks}:
            misplaced += 1
            borrowed += m.position in {o.position for o in scene}
    attributes = dict.fromkeys(ATTRIBUTES, 0)
    for obj in scene:
        closest = max(mentions, key=lambda m: m.agreement(obj), default=None)
        for a in ATTRIBUTES:
            attributes[a] += closest is not None and getattr(closest, a) == getattr(obj, a)
    return {
        "right": right,
        "objects": len(scene),
        "extra": extra,
        "attributes": attributes,
        "misplaced": misplaced,
        "borrowed": borrowed,
    }


def describe_misplaced(result: Mapping[str, Any]) -> str:
    """``object_accuracy``'s misplaced count in words; the borrowed share only when something is misplaced
    (of no misplaced mention it is undefined: NaN in the dict, left out here rather than printed "nan")."""
    text = f"misplaced per image {result['misplaced_per_image']:.3f}"
    if not math.isnan(result["borrowed_positions"]):
        text += f", of them another object's position {result['borrowed_positions']:.2f}"
    return text


def object_accuracy(
    captions: Sequence[str | Sequence[str]], scenes: Sequence[Sequence[Any]]
) -> dict[str, Any]:
    """Corpus object accuracy (module docstring) of ``captions[i]`` against the objects of ``scenes[i]``."""
    if len(captions) != len(scenes):
        raise ValueError(f"{len(captions)} captions but {len(scenes)} scenes")
    right = objects = extra = misplaced = borrowed = 0
    attributes = dict.fromkeys(ATTRIBUTES, 0)
    for caption, scene in zip(captions, scenes):
        s = score_caption(caption, scene)
        right, objects, extra = right + s["right"], objects + s["objects"], extra + s["extra"]
        misplaced, borrowed = misplaced + s["misplaced"], borrowed + s["borrowed"]
        for a in ATTRIBUTES:
            attributes[a] += s["attributes"][a]
    return {
        "object_accuracy": right / objects if objects else float("nan"),
        "extra_per_image": extra / len(captions) if captions else float("nan"),
        "attribute_accuracy": {a: attributes[a] / objects if objects else float("nan") for a in ATTRIBUTES},
        "misplaced_per_image": misplaced / len(captions) if captions else float("nan"),
        "borrowed_positions": borrowed / misplaced if misplaced else float("nan"),
        "objects": objects,
        "images": len(captions),
    }


def format_objects(result: Mapping[str, Any]) -> str:
    """``captioning evaluate``'s line for :func:`object_accuracy`'s result."""
    per = " ".join(f"{a} {v:.3f}" for a, v in result["attribute_accuracy"].items())
    return (
        f"objects named right: {result['object_accuracy']:.4f} of {result['objects']} (size, colour, shape and "
        f"position all right; {per}); extra objects per image: {result['extra_per_image']:.3f}; "
        f"{describe_misplaced(result)}"
    )


METRIC = SceneMetric(
    name="objects",
    compute=lambda batch, before: object_accuracy(batch.captions, batch.scenes),
    value=lambda result: result["object_accuracy"],
    format=format_objects,
)
