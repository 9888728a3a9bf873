"""What data a checkpoint was trained on: the recorded data config, else recognised from its vocabulary
(synthetic scenes have a small fixed one). The Captioner's note on photos and ``evaluate``'s default
``data=`` read it."""

from __future__ import annotations

from functools import cache
from typing import Any


@cache  # fixed by the scene grammar; read by every Captioner and evaluation
def synthetic_words() -> frozenset[str]:
    """Every word a synthetic scene's reference caption can use (``captioning.data.synthetic``)."""
    from captioning.data.synthetic import COLORS, POSITIONS, SHAPES, SIZES, SceneObject, scene_captions

    objects = [SceneObject(s, c, z, p, (0, 0, 0, 0)) for s in SHAPES for c in COLORS for z in SIZES
               for p in POSITIONS]  # fmt: skip
    words = set()
    for pair in ((o,) for o in objects[:: len(POSITIONS)]), zip(objects, objects[1:]):
        for group in pair:
            for caption in scene_captions(tuple(group)):
                words.update(caption.split())
    for o in objects:  # every position word, in both templates
        words.update(o.position.split())
    return frozenset(words)


def trained_data(meta: dict[str, Any]) -> str | None:
    """The data config (``captioning/conf/data/<name>.yaml``) a checkpoint's plain-data entry says it was
    trained on: its provenance's ``data`` (what ``captioning-train`` and ``captioning.train`` record; an
    export keeps it); else ``"synthetic"`` for a vocabulary of nothing but synthetic-scene words
    (:func:`scene_vocabulary`: a checkpoint from before the record; a model of the user's own data that only
    shares some of those words is not one); else None."""
    provenance = meta.get("provenance") if isinstance(meta.get("provenance"), dict) else {}
    recorded = provenance.get("data")
    if isinstance(recorded, dict):  # a recorded config group choice or config with its name
        recorded = recorded.get("name")
    if isinstance(recorded, str) and recorded.strip():
        return recorded.strip()
    vocab = meta.get("vocab")
    itos = vocab.get("itos") if isinstance(vocab, dict) else None
    if not isinstance(itos, list):
        return None
    return "synthetic" if scene_vocabulary(itos) else None


def synthetic_note(path: object) -> str:
    """What a synthetic-scene model's caption of a photo is worth, in one line naming the checkpoint."""
    return (
        f"{path}: trained on synthetic scenes (coloured shapes on a plain background, data=synthetic): its "
        "captions of photos name shapes and colours, not what the photo shows"
    )


def scene_vocabulary(itos: list[str]) -> bool:
    """Whether a vocabulary holds nothing but synthetic-scene words (a scene model, whatever its data
    config was called); the special tokens (``<pad>`` ...) do not count."""
    words = [w for w in itos if isinstance(w, str) and not (w.startswith("<") and w.endswith(">"))]
    known = synthetic_words()
    return bool(words) and all(w in known for w in words)
