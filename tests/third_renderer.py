"""A third, independent renderer of the synthetic-scene specification (held-out check only).

Written from the written spec alone, without reading any other scene-drawing code in this
repository.  It is not used for training and nothing here was tuned for a model.

Spec (fixed): 96x96 RGB, dark noisy background (values roughly 0-45); 3x3 grid of 32x32 cells named
row-major "top left", "top", "top right", "left", "center", "right", "bottom left", "bottom",
"bottom right"; 1 or 2 objects in distinct cells, each entirely inside its cell; shape in
{circle, square, triangle}; colour nominal RGB red (230,50,50), green (50,200,70), blue (60,90,230),
yellow (240,220,60); size small (~14 px across) or big (~26 px across); captions
"a {size} {colour} {shape} in the {position}", two objects joined by " and " (either order),
optionally prefixed "there is "; each object has a box (x0, y0, x1, y1) in canvas pixels.

Choices made here for everything the spec leaves open:
- Coordinates: continuous; pixel (i, j) covers [i, i+1] x [j, j+1] and is sampled at its centre.
  Boxes are the exact geometric bounding box of the ideal shape (the 50 % coverage contour), floats.
- Object count: 1 or 2 with probability 1/2 each; cells drawn without replacement; shape, colour and
  size uniform and independent.  Objects are returned sorted by cell index (row-major).
- Size: a target extent d = nominal (14 or 26) + U(-2, 2) px.
  * circle: diameter d (box is d x d).
  * square: rotated by a uniform angle in [-15, 15] degrees; its side is d / (|cos| + |sin|), so the
    axis-aligned box of the rotated square is exactly d x d.
  * triangle: apex up; the apex is shifted sideways by U(-0.12, 0.12) x base and the triangle is
    rotated by U(-6, 6) degrees, then stretched (affinely) so that its box is w x h with w and h drawn
    independently from nominal + U(-2.5, 2.5): proportions vary, the shape stays a triangle.
- Position: the box centre is uniform over the positions keeping the box >= 1 px inside its cell
  (so big objects jitter about +-1 px, small ones about +-7 px).
- Drawing: signed distance functions (exact circle and convex-polygon SDFs), coverage
  alpha = clip(0.5 - sdf / s, 0, 1) with a per-object edge softness s ~ U(0.8, 1.6) px (a linear
  soft edge, not supersampled PIL anti-aliasing).
- Colour: nominal RGB + per-channel U(-15, 15) jitter per object, then a linear shading across the
  object: factor 1 + g . (p - centre) / extent, |g| <= 0.12 in a random direction (zero at the centre),
  plus per-pixel Gaussian noise sigma 2.5 on the object; composited "over" the background by alpha.
- Background: a per-image dark tint (each channel U(4, 20)), plus low-frequency noise (a random 5x5
  grid per channel, +-8, bilinearly upsampled), plus 2-4 soft Gaussian blobs (radius 8-24 px,
  brightness up to +10, slightly tinted), plus per-pixel Gaussian noise with sigma U(1.5, 3.5); then
  clipped to [0, 45] and rounded.
- References: for one object the bare phrase and its "there is " form; for two objects both orders,
  each bare and with "there is " (4 captions).
"""

from __future__ import annotations

import numpy as np

SIZE = 96
CELL = 32
POSITIONS = (
    "top left",
    "top",
    "top right",
    "left",
    "center",
    "right",
    "bottom left",
    "bottom",
    "bottom right",
)
SHAPES = ("circle", "square", "triangle")
COLORS = {
    "red": (230, 50, 50),
    "green": (50, 200, 70),
    "blue": (60, 90, 230),
    "yellow": (240, 220, 60),
}
SIZES = {"small": 14, "big": 26}
MARGIN = 1.0  # the box keeps at least this far inside its cell
BG_MAX = 45

_YY, _XX = np.mgrid[0:SIZE, 0:SIZE].astype(np.float64) + 0.5  # pixel centres


def cell_origin(position: str) -> tuple[int, int]:
    """(x, y) of the top-left corner of the named cell."""
    k = POSITIONS.index(position)
    return (k % 3) * CELL, (k // 3) * CELL


def _rot(theta: float) -> np.ndarray:
    c, s = np.cos(theta), np.sin(theta)
    return np.array([[c, -s], [s, c]])


def _polygon_sdf(verts: np.ndarray) -> np.ndarray:
    """Exact signed distance (negative inside) from every pixel centre to a convex polygon."""
    px, py = _XX, _YY
    dist = np.full(px.shape, np.inf)
    area2 = 0.0
    n = len(verts)
    for i in range(n):
        a, b = verts[i], verts[(i + 1) % n]
        area2 += a[0] * b[1] - b[0] * a[1]
    orient = 1.0 if area2 > 0 else -1.0
    inside = np.ones(px.shape, dtype=bool)
    for i in range(n):
        a, b = verts[i], verts[(i + 1) % n]
        ex, ey = b[0] - a[0], b[1] - a[1]
        wx, wy = px - a[0], py - a[1]
        t = np.clip((wx * ex + wy * ey) / (ex * ex + ey * ey), 0.0, 1.0)
        dx, dy = wx - t * ex, wy - t * ey
        dist = np.minimum(dist, np.sqrt(dx * dx + dy * dy))
        inside &= orient * (ex * wy - ey * wx) >= 0
    return np.where(inside, -dist, dist)


def _shape_geometry(shape: str, nominal: int, rng: np.random.Generator):
    """Return (sdf_fn(cx, cy), width, height) for a shape centred (by its box) at (cx, cy)."""
    if shape == "circle":
        d = nominal + rng.uniform(-2.0, 2.0)
        r = d / 2

        def sdf(cx, cy):
            return np.hypot(_XX - cx, _YY - cy) - r

        return sdf, d, d
    if shape == "square":
        d = nominal + rng.uniform(-2.0, 2.0)
        theta = np.deg2rad(rng.uniform(-15.0, 15.0))
        side = d / (abs(np.cos(theta)) + abs(np.sin(theta)))
        unit = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]], dtype=np.float64) * side / 2
        local = unit @ _rot(theta).T  # centred; its box is d x d around the origin

        def sdf(cx, cy):
            return _polygon_sdf(local + np.array([cx, cy]))

        return sdf, d, d
    if shape == "triangle":
        w = nominal + rng.uniform(-2.5, 2.5)
        h = nominal + rng.uniform(-2.5, 2.5)
        apex = rng.uniform(-0.12, 0.12)
        base = np.array([[-0.5, 0.5], [0.5, 0.5], [apex, -0.5]])  # y grows downwards: apex up
        base = base @ _rot(np.deg2rad(rng.uniform(-6.0, 6.0))).T
        lo, hi = base.min(axis=0), base.max(axis=0)
        local = (base - (lo + hi) / 2) / (hi - lo) * np.array([w, h])  # box exactly w x h, centred

        def sdf(cx, cy):
            return _polygon_sdf(local + np.array([cx, cy]))

        return sdf, w, h
    raise ValueError(shape)


def _background(rng: np.random.Generator) -> np.ndarray:
    tint = rng.uniform(4.0, 20.0, size=3)
    img = np.broadcast_to(tint, (SIZE, SIZE, 3)).copy()
    # low-frequency noise: a coarse 5x5 grid per channel, bilinearly upsampled to the canvas
    grid = rng.uniform(-8.0, 8.0, size=(5, 5, 3))
    g = (np.arange(SIZE) + 0.5) / SIZE * 4  # grid coordinate in [0, 4]
    i0 = np.clip(np.floor(g).astype(int), 0, 3)
    f = g - i0
    rows = grid[i0] * (1 - f)[:, None, None] + grid[i0 + 1] * f[:, None, None]  # (96, 5, 3)
    low = rows[:, i0] * (1 - f)[None, :, None] + rows[:, i0 + 1] * f[None, :, None]
    img += low
    for _ in range(rng.integers(2, 5)):
        bx, by = rng.uniform(0, SIZE, size=2)
        rad = rng.uniform(8.0, 24.0)
        amp = rng.uniform(3.0, 10.0) * rng.uniform(0.6, 1.0, size=3)
        img += np.exp(-((_XX - bx) ** 2 + (_YY - by) ** 2) / (2 * rad * rad))[..., None] * amp
    img += rng.normal(0.0, rng.uniform(1.5, 3.5), size=img.shape)
    return np.clip(np.round(img), 0, BG_MAX)


def render(rng: np.random.Generator) -> tuple[np.ndarray, list[dict]]:
    """One scene: a (96, 96, 3) uint8 image and its objects in row-major cell order."""
    n = int(rng.integers(1, 3))
    cells = sorted(int(c) for c in rng.choice(9, size=n, replace=False))
    img = _background(rng)
    objects = []
    for k in cells:
        position = POSITIONS[k]
        shape = SHAPES[int(rng.integers(len(SHAPES)))]
        color = list(COLORS)[int(rng.integers(len(COLORS)))]
        size = list(SIZES)[int(rng.integers(len(SIZES)))]
        sdf_fn, w, h = _shape_geometry(shape, SIZES[size], rng)
        ox, oy = cell_origin(position)
        cx = ox + rng.uniform(MARGIN + w / 2, CELL - MARGIN - w / 2)
        cy = oy + rng.uniform(MARGIN + h / 2, CELL - MARGIN - h / 2)
        softness = rng.uniform(0.8, 1.6)
        alpha = np.clip(0.5 - sdf_fn(cx, cy) / softness, 0.0, 1.0)[..., None]
        base = np.asarray(COLORS[color], dtype=np.float64) + rng.uniform(-15.0, 15.0, size=3)
        ang = rng.uniform(0, 2 * np.pi)
        grad = rng.uniform(0.0, 0.12) * np.array([np.cos(ang), np.sin(ang)])
        ext = max(w, h)
        shade = 1 + (grad[0] * (_XX - cx) + grad[1] * (_YY - cy)) / ext
        fill = base * shade[..., None] + rng.normal(0.0, 2.5, size=img.shape)
        img = img * (1 - alpha) + np.clip(fill, 0, 255) * alpha
        box = (float(cx - w / 2), float(cy - h / 2), float(cx + w / 2), float(cy + h / 2))
        objects.append({"shape": shape, "color": color, "size": size, "position": position, "box": box})
    return np.clip(np.round(img), 0, 255).astype(np.uint8), objects


def _phrase(o: dict) -> str:
    return f"a {o['size']} {o['color']} {o['shape']} in the {o['position']}"


def references(objects: list[dict]) -> list[str]:
    """Several valid captions for the objects (every order, bare and with "there is ")."""
    phrases = [_phrase(o) for o in objects]
    orders = [phrases] if len(phrases) == 1 else [phrases, phrases[::-1]]
    out = []
    for order in orders:
        body = " and ".join(order)
        out += [body, "there is " + body]
    return out
