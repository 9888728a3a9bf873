"""A second, independently written renderer of the synthetic-scene spec (numpy rasterisation).

It shares no code with captioning.data.synthetic: shapes are rasterised from implicit equations with
5×5 sub-pixel sampling, the background is a vertical gradient with uniform noise, and equilateral
triangles are used. A captioner that only memorised our renderer's quirks would fail on these.
"""

from __future__ import annotations

import numpy as np

RGB = {"red": (230, 50, 50), "green": (50, 200, 70), "blue": (60, 90, 230), "yellow": (240, 220, 60)}
PX = {"small": 14, "big": 26}
WHERE = ["top left", "top", "top right", "left", "center", "right", "bottom left", "bottom", "bottom right"]


def _coverage(shape: str, cx: float, cy: float, size: float, n: int = 96, sub: int = 5) -> np.ndarray:
    offsets = (np.arange(sub) + 0.5) / sub
    ys = (np.arange(n)[:, None] + offsets[None, :]).reshape(-1)  # (n*sub,)
    yy, xx = np.meshgrid(ys, ys, indexing="ij")
    dx, dy = xx - cx, yy - cy
    r = size / 2
    if shape == "circle":
        inside = dx**2 + dy**2 <= r**2
    elif shape == "square":
        inside = (np.abs(dx) <= r) & (np.abs(dy) <= r)
    else:  # equilateral triangle, apex up, centred on its bounding box
        h = size * np.sqrt(3) / 2
        top, bottom = -h / 2, h / 2
        half_width = (dy - top) / h * r
        inside = (dy >= top) & (dy <= bottom) & (np.abs(dx) <= half_width)
    return inside.reshape(n, sub, n, sub).mean(axis=(1, 3))  # (n, n) fraction covered


def render(rng: np.random.Generator) -> tuple[np.ndarray, list[dict]]:
    top, bottom = rng.uniform(0, 40, 3), rng.uniform(0, 40, 3)
    t = np.linspace(0, 1, 96)[:, None, None]
    img = np.broadcast_to(top * (1 - t) + bottom * t, (96, 96, 3)).copy()
    img += rng.uniform(-8, 8, img.shape)
    objects = []
    for cell in rng.permutation(9)[: rng.integers(1, 3)]:
        shape = ["circle", "square", "triangle"][rng.integers(3)]
        color = list(RGB)[rng.integers(4)]
        size_word = list(PX)[rng.integers(2)]
        size = PX[size_word] + rng.uniform(-1.5, 1.5)
        row, col = divmod(int(cell), 3)
        room = (32 - size) / 2 - 1
        cx = col * 32 + 16 + rng.uniform(-room, room)
        cy = row * 32 + 16 + rng.uniform(-room, room)
        cover = _coverage(shape, cx, cy, size)[..., None]
        colour = np.clip(np.array(RGB[color]) + rng.uniform(-10, 10, 3), 0, 255)
        img = img * (1 - cover) + colour * cover
        objects.append(
            {
                "shape": shape,
                "color": color,
                "size": size_word,
                "position": WHERE[int(cell)],
                "box": (cx - size / 2, cy - size / 2, cx + size / 2, cy + size / 2),
            }
        )
    objects.sort(key=lambda o: WHERE.index(o["position"]))
    return np.clip(img, 0, 255).astype(np.uint8), objects


def references(objects: list[dict]) -> list[str]:
    """Independent references: every ordering of the objects, with two phrasings."""
    phrases = [f"a {o['size']} {o['color']} {o['shape']} in the {o['position']}" for o in objects]
    orders = [phrases, phrases[::-1]] if len(phrases) == 2 else [phrases]
    return [" and ".join(p) for p in orders] + ["there is " + " and ".join(p) for p in orders]
