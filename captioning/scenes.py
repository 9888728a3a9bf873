"""What a synthetic scene is made of: the one scene-object type and the one vocabulary of scene words.

The renderer (captioning.data.synthetic) draws its objects from this vocabulary, and every scene metric
(captioning.metrics.objects, .grounding, .scenes) reads the same words and the same :class:`SceneObject`.
Scripts, tests and a batch (``SyntheticSource.scene`` carries plain data) may hand the metrics dicts with
the keys ``shape, color, size, position, box``: :func:`scene_object` converts one, once, at the metrics'
boundary, and ``SceneObject.to_dict`` gives that dict back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SHAPES = ("circle", "square", "triangle")
COLORS = ("red", "green", "blue", "yellow")
SIZES = ("small", "big")
POSITIONS = (  # row-major over the 3×3 grid
    "top left", "top", "top right",
    "left", "center", "right",
    "bottom left", "bottom", "bottom right",
)  # fmt: skip
POSITION_WORDS = tuple(dict.fromkeys(w for p in POSITIONS for w in p.split()))  # top left right center bottom
FIELDS = ("shape", "color", "size", "position", "box")


@dataclass(frozen=True)
class SceneObject:
    """One object of a scene. ``position`` is one of :data:`POSITIONS`; ``box`` is ``(x0, y0, x1, y1)`` in
    pixels of the image (stored as floats). A metric that does not read one of them (object accuracy reads
    no box, grounding no position) accepts an object without it (``None``)."""

    shape: str
    color: str
    size: str
    position: str | None = None
    box: tuple[float, float, float, float] | None = None

    def __post_init__(self) -> None:
        if self.box is not None:
            box = tuple(float(v) for v in self.box)
            if len(box) != 4:
                raise ValueError(f"scene object box {self.box!r} must be (x0, y0, x1, y1) in pixels")
            object.__setattr__(self, "box", box)

    @property
    def phrase(self) -> str:
        return f"{self.size} {self.color} {self.shape}"

    def to_dict(self) -> dict[str, Any]:
        """The plain-data form (``dataclasses.asdict``): what a batch carries and scripts pass."""
        return {k: getattr(self, k) for k in FIELDS}


def scene_object(obj: SceneObject | Mapping[str, Any] | Any, needs: Sequence[str] = ()) -> SceneObject:
    """``obj`` as a :class:`SceneObject`: itself, or built from a mapping or from any object with those
    attributes; a ValueError names the fields of ``needs`` it lacks (a metric's ``needs``: what it reads)."""
    if isinstance(obj, SceneObject):
        values = {k: getattr(obj, k) for k in FIELDS}
    else:
        get = obj.get if isinstance(obj, Mapping) else lambda k: getattr(obj, k, None)
        values = {k: get(k) for k in FIELDS}
    missing = sorted(k for k in needs if values[k] is None)
    if missing:
        raise ValueError(f"scene object {obj!r} lacks keys {missing}; expected {', '.join(needs)}")
    return obj if isinstance(obj, SceneObject) else SceneObject(**values)
