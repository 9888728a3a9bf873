"""Synthetic scenes: coloured shapes on a 3×3 grid, captioned in words, generated from a seed.

The default data set: it needs no files, trains a captioner in minutes on a CPU, and every object's
bounding box is known, so one can measure whether attention lands on the object a word names.

Spec (other code and checks rely on these exact words and colours): 96×96 RGB canvas with a dark noisy
background; 1 or 2 objects, each in a different cell of the 3×3 grid (cells 32×32); shapes circle,
square, triangle; colours red (230,50,50), green (50,200,70), blue (60,90,230), yellow (240,220,60);
sizes small (~14 px across) and big (~26 px). Everything the spec leaves open is randomised (size within
a few pixels, position jitter in the cell, colour jitter, slight rotation, anti-aliased edges, background
tint and noise) so that a model trained here captions scenes from any renderer following the spec.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

from captioning import scenes as _vocabulary
from captioning.scenes import POSITIONS, SHAPES, SceneObject  # the one vocabulary and object type

CANVAS, CELL = 96, 32
# The spec's colour of each colour word and size of each size word, in the vocabulary's order.
COLORS = dict(
    zip(_vocabulary.COLORS, ((230, 50, 50), (50, 200, 70), (60, 90, 230), (240, 220, 60)), strict=True)
)
SIZES = dict(zip(_vocabulary.SIZES, (14, 26), strict=True))
_SUPERSAMPLE = 4  # draw at 4× and box-filter down: anti-aliased edges


@dataclass(frozen=True)
class Scene:
    image: np.ndarray  # (96, 96, 3) uint8
    captions: tuple[str, ...]  # five references
    objects: tuple[SceneObject, ...]  # in reading order of their cells


def _where(position: str) -> str:
    return "in the center" if position == "center" else f"in the {position}"


def _at(position: str) -> str:
    return "at the center" if position == "center" else f"on the {position}"


def scene_captions(objects: tuple[SceneObject, ...]) -> tuple[str, ...]:
    """Five references from different templates; the first lists objects in reading order."""
    a = [f"a {o.phrase} {_where(o.position)}" for o in objects]
    the = [f"the {o.position} has a {o.phrase}" for o in objects]
    at = [f"a {o.phrase} {_at(o.position)}" for o in objects]
    if len(objects) == 1:
        return (
            a[0],
            f"there is {a[0]}",
            at[0],
            the[0],
            f"one {objects[0].phrase} {_where(objects[0].position)}",
        )
    return (
        f"{a[0]} and {a[1]}",
        f"there is {a[0]} and {a[1]}",
        f"{a[1]} and {a[0]}",
        f"{at[0]} with {at[1]}",
        f"{the[0]} and {the[1]}",
    )


def shuffled_captions(objects: tuple[SceneObject, ...], rng: np.random.Generator) -> tuple[str, ...]:
    """The five templates of ``scene_captions``, each listing the objects in an order drawn from ``rng``.

    ``scene_captions`` lists them in reading order in four templates of five, so "the first object named
    is the top-left one" predicts the first position word 80% of the time without looking at the object.
    Here no template carries that order: a position word can only come from where the named object is.
    """
    both = scene_captions(objects), scene_captions(objects[::-1])
    return tuple(both[int(flip)][k] for k, flip in enumerate(rng.integers(0, 2, size=5)))


def _polygon(shape: str, cx: float, cy: float, side: float, angle: float) -> list[tuple[float, float]]:
    if shape == "square":
        corners = [(-0.5, -0.5), (0.5, -0.5), (0.5, 0.5), (-0.5, 0.5)]
    else:  # upright triangle, as wide as it is tall
        corners = [(0.0, -0.5), (0.5, 0.5), (-0.5, 0.5)]
    cos, sin = math.cos(angle), math.sin(angle)
    return [(cx + side * (x * cos - y * sin), cy + side * (x * sin + y * cos)) for x, y in corners]


def render_scene(seed: int | tuple[int, ...]) -> Scene:
    """Render one scene deterministically from ``seed`` (an int or a tuple of ints)."""
    rng = np.random.default_rng(seed)
    s = _SUPERSAMPLE
    tint = rng.uniform(8, 45, size=3)
    canvas = Image.new("RGB", (CANVAS * s, CANVAS * s), tuple(int(v) for v in tint))
    draw = ImageDraw.Draw(canvas)
    cells = sorted(rng.choice(9, size=int(rng.integers(1, 3)), replace=False).tolist())
    objects = []
    for cell in cells:
        shape = SHAPES[rng.integers(len(SHAPES))]
        color = list(COLORS)[rng.integers(len(COLORS))]
        size = list(SIZES)[rng.integers(len(SIZES))]
        side = SIZES[size] + rng.uniform(-2.0, 2.0)
        slack = (CELL - side) / 2 - 1.5  # keep the whole object inside its cell
        row, col = divmod(cell, 3)
        cx = col * CELL + CELL / 2 + rng.uniform(-slack, slack)
        cy = row * CELL + CELL / 2 + rng.uniform(-slack, slack)
        rgb = tuple(int(np.clip(v + rng.integers(-12, 13), 0, 255)) for v in COLORS[color])
        if shape == "circle":
            r = side / 2
            draw.ellipse([(cx - r) * s, (cy - r) * s, (cx + r) * s, (cy + r) * s], fill=rgb)
            points = [(cx - r, cy - r), (cx + r, cy + r)]
        else:
            points = _polygon(shape, cx, cy, side, angle=rng.uniform(-0.15, 0.15))
            draw.polygon([(x * s, y * s) for x, y in points], fill=rgb)
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        box = (max(0.0, min(xs)), max(0.0, min(ys)), min(float(CANVAS), max(xs)), min(float(CANVAS), max(ys)))
        objects.append(SceneObject(shape, color, size, POSITIONS[cell], box))
    image = np.asarray(canvas.resize((CANVAS, CANVAS), Image.Resampling.BOX), dtype=np.float32)
    image = image + rng.normal(0.0, rng.uniform(3.0, 9.0), size=image.shape)  # sensor-like noise
    image = np.clip(image, 0, 255).astype(np.uint8)
    objects = tuple(objects)
    return Scene(image=image, captions=scene_captions(objects), objects=objects)
