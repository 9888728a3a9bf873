"""tests/third_renderer.py follows the synthetic-scene spec (checked against the spec, not other code)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from third_renderer import references, render

NOMINAL = {
    "red": (230, 50, 50),
    "green": (50, 200, 70),
    "blue": (60, 90, 230),
    "yellow": (240, 220, 60),
}
SIZES = {"small": 14, "big": 26}
POSITIONS = [
    "top left",
    "top",
    "top right",
    "left",
    "center",
    "right",
    "bottom left",
    "bottom",
    "bottom right",
]
PHRASE = re.compile(
    r"a (small|big) (red|green|blue|yellow) (circle|square|triangle) in the "
    r"(top left|top right|bottom left|bottom right|top|bottom|left|right|center)"
)
N = 200


@pytest.fixture(scope="module")
def scenes():
    rng = np.random.default_rng(1234)
    return [render(rng) for _ in range(N)]


def _cell(position: str) -> tuple[int, int, int, int]:
    k = POSITIONS.index(position)
    x0, y0 = (k % 3) * 32, (k // 3) * 32
    return x0, y0, x0 + 32, y0 + 32


def test_image_format_and_counts(scenes):
    counts = set()
    for img, objs in scenes:
        assert img.shape == (96, 96, 3) and img.dtype == np.uint8
        assert 1 <= len(objs) <= 2
        counts.add(len(objs))
        for o in objs:
            assert set(o) == {"shape", "color", "size", "position", "box"}
            assert o["shape"] in ("circle", "square", "triangle")
            assert o["color"] in NOMINAL and o["size"] in SIZES and o["position"] in POSITIONS
            assert len(o["box"]) == 4 and all(isinstance(v, float) for v in o["box"])
    assert counts == {1, 2}


def test_distinct_cells_in_row_major_order(scenes):
    for _, objs in scenes:
        idx = [POSITIONS.index(o["position"]) for o in objs]
        assert idx == sorted(set(idx))


def test_boxes_inside_their_cells_with_nominal_size(scenes):
    for _, objs in scenes:
        for o in objs:
            x0, y0, x1, y1 = o["box"]
            cx0, cy0, cx1, cy1 = _cell(o["position"])
            assert cx0 <= x0 < x1 <= cx1 and cy0 <= y0 < y1 <= cy1, o
            nominal = SIZES[o["size"]]
            assert abs((x1 - x0) - nominal) <= 3 and abs((y1 - y0) - nominal) <= 3, o


def _centre(o: dict) -> tuple[float, float]:
    x0, y0, x1, y1 = o["box"]
    if o["shape"] == "triangle":  # apex up: the interior is thickest low down (centroid at 2/3 height)
        return (x0 + x1) / 2, y0 + 0.62 * (y1 - y0)
    return (x0 + x1) / 2, (y0 + y1) / 2


def test_colour_at_object_centre_is_near_nominal(scenes):
    names = list(NOMINAL)
    table = np.array([NOMINAL[c] for c in names], dtype=float)
    for img, objs in scenes:
        for o in objs:
            x, y = _centre(o)
            px = img[int(y), int(x)].astype(float)
            assert np.abs(px - NOMINAL[o["color"]]).max() <= 40, (o, px)
            assert names[int(np.abs(table - px).sum(1).argmin())] == o["color"]


def test_pixels_agree_with_boxes(scenes):
    for img, objs in scenes:
        for o in objs:
            cx0, cy0, cx1, cy1 = _cell(o["position"])
            mask = img[cy0:cy1, cx0:cx1].max(axis=2) > 100  # at least ~half covered by the object
            ys, xs = np.nonzero(mask)
            x0, y0, x1, y1 = o["box"]
            got = (cx0 + xs.min(), cy0 + ys.min(), cx0 + xs.max() + 1, cy0 + ys.max() + 1)
            assert np.abs(np.array(got) - np.array([x0, y0, x1, y1])).max() <= 1.5, (o, got)


def test_background_is_dark(scenes):
    for img, objs in scenes:
        outside = np.ones((96, 96), dtype=bool)
        for o in objs:
            x0, y0, x1, y1 = o["box"]
            outside[
                max(0, int(y0) - 1) : int(np.ceil(y1)) + 1, max(0, int(x0) - 1) : int(np.ceil(x1)) + 1
            ] = False
        bg = img[outside]
        assert bg.max() <= 45 and bg.mean() < 35


def test_noisy_background_is_not_flat(scenes):
    img, objs = scenes[0]
    corner = img[:8, :8].astype(float) if objs[0]["position"] != "top left" else img[-8:, -8:].astype(float)
    assert corner.std() > 0.5


def test_deterministic_for_a_seed():
    a_img, a_objs = render(np.random.default_rng(7))
    b_img, b_objs = render(np.random.default_rng(7))
    assert np.array_equal(a_img, b_img) and a_objs == b_objs
    c_img, _ = render(np.random.default_rng(8))
    assert not np.array_equal(a_img, c_img)


def _parse(caption: str) -> set[tuple[str, str, str, str]]:
    body = caption.removeprefix("there is ")
    parts = body.split(" and ")
    out = set()
    for p in parts:
        m = PHRASE.fullmatch(p)
        assert m, caption
        out.add(m.groups())
    assert len(out) == len(parts)
    return out


def test_references_parse_back_to_the_objects(scenes):
    for _, objs in scenes:
        refs = references(objs)
        assert len(refs) >= 2 and len(set(refs)) == len(refs)
        want = {(o["size"], o["color"], o["shape"], o["position"]) for o in objs}
        for r in refs:
            assert r == r.lower() and _parse(r) == want
        if len(objs) == 2:  # both orders offered
            firsts = {PHRASE.match(r.removeprefix("there is ")).group(0) for r in refs}
            assert len(firsts) == 2
