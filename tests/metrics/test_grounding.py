"""Attention grounding on hand-made scenes and attention maps with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from captioning.data.tokenize import tokenize
from captioning.metrics.grounding import (
    GroundingSample,
    SceneObject,
    grounding_accuracy,
    match_phrase,
    peak_pixel,
    split_phrases,
)

# 64x64 image seen through a 4x4 feature grid: each cell covers 16x16 pixels.
GRID = (4, 4)
IMAGE = (64, 64)
RED_CIRCLE = SceneObject(shape="circle", color="red", size="big", box=(0, 0, 32, 32))  # top left
BLUE_SQUARE = SceneObject(shape="square", color="blue", size="small", box=(32, 32, 64, 64))  # bottom right
TOP_LEFT_CELL, BOTTOM_RIGHT_CELL = 0, 15  # centres (8, 8) and (56, 56)


def one_hot_attention(peaks: list[int], cells: int = 16) -> np.ndarray:
    """(T, H*W) attention with all mass on cell ``peaks[t]`` at step t (plus a little uniform noise)."""
    att = np.full((len(peaks), cells), 0.01)
    att[np.arange(len(peaks)), peaks] = 1.0
    return att / att.sum(axis=1, keepdims=True)


def test_one_hit_one_miss_gives_one_half():
    tokens = tokenize("a red circle")
    # "red" looks at the circle (hit), "circle" looks at the bottom right corner (miss); "a" is ignored.
    att = one_hot_attention([BOTTOM_RIGHT_CELL, TOP_LEFT_CELL, BOTTOM_RIGHT_CELL])
    sample = GroundingSample(tokens=tokens, attention=att, grid=GRID, image_size=IMAGE, objects=[RED_CIRCLE])
    result = grounding_accuracy([sample])
    assert {k: result[k] for k in ("grounding", "words", "unmatched")} == {
        "grounding": 0.5,
        "words": 2,
        "unmatched": 0,
    }
    # "red" hit, "circle" missed; no size word, so its ratio is undefined (NaN), not 0
    attr = result["attribute_grounding"]
    assert attr["color"] == 1.0 and attr["shape"] == 0.0 and math.isnan(attr["size"])


def test_two_objects_each_word_judged_against_its_own_phrase():
    tokens = tokenize("a big red circle in the top left and a small blue square in the bottom right")
    peaks = [0] * len(tokens)
    # phrase 1 (big red circle): big -> circle (hit), red -> square (miss), circle -> circle (hit)
    peaks[1], peaks[2], peaks[3] = TOP_LEFT_CELL, BOTTOM_RIGHT_CELL, TOP_LEFT_CELL
    # phrase 2 (small blue square): all three look at the square (3 hits)
    peaks[10], peaks[11], peaks[12] = BOTTOM_RIGHT_CELL, BOTTOM_RIGHT_CELL, BOTTOM_RIGHT_CELL
    sample = GroundingSample(
        tokens=tokens,
        attention=torch.tensor(one_hot_attention(peaks)),  # tensors are accepted too
        grid=GRID,
        image_size=IMAGE,
        objects=[RED_CIRCLE, BLUE_SQUARE],
    )
    assert grounding_accuracy([sample]) == {
        "grounding": 5 / 6,
        "words": 6,
        "unmatched": 0,
        "attribute_grounding": {"size": 1.0, "color": 0.5, "shape": 1.0},  # only "red" missed
    }


def test_ambiguous_and_absent_objects_are_unmatched_and_excluded():
    other_circle = {"shape": "circle", "color": "green", "size": "small", "box": (40, 0, 64, 24)}
    tokens = tokenize("a circle and a yellow triangle and a small blue square")
    # "circle" fits two circles (ambiguous), "yellow triangle" fits nothing: 3 unmatched words.
    # "small blue square" all look at the square: 3 hits.
    att = one_hot_attention([BOTTOM_RIGHT_CELL] * len(tokens))
    sample = GroundingSample(
        tokens=tokens,
        attention=att,
        grid=GRID,
        image_size=IMAGE,
        objects=[RED_CIRCLE, other_circle, BLUE_SQUARE],
    )
    assert grounding_accuracy([sample]) == {
        "grounding": 1.0,
        "words": 3,
        "unmatched": 3,  # the unmatched words enter no attribute's ratio either
        "attribute_grounding": {"size": 1.0, "color": 1.0, "shape": 1.0},
    }


def test_counts_pool_over_samples_and_extra_attention_rows_are_ignored():
    hit = GroundingSample(
        tokens=["circle"],
        attention=one_hot_attention([TOP_LEFT_CELL, BOTTOM_RIGHT_CELL]),  # 2nd row: the <end> step
        grid=GRID,
        image_size=IMAGE,
        objects=[RED_CIRCLE],
    )
    miss = GroundingSample(
        tokens=["square", "square"],
        attention=one_hot_attention([TOP_LEFT_CELL, TOP_LEFT_CELL]),
        grid=GRID,
        image_size=IMAGE,
        objects=[BLUE_SQUARE],
    )
    result = grounding_accuracy([hit, miss])
    assert {k: result[k] for k in ("grounding", "words", "unmatched")} == {
        "grounding": 1 / 3,
        "words": 3,
        "unmatched": 0,
    }
    assert result["attribute_grounding"]["shape"] == 1 / 3


def test_no_object_words_gives_nan():
    sample = GroundingSample(
        tokens=["a", "picture"], attention=np.ones((2, 16)), grid=GRID, image_size=IMAGE, objects=[]
    )
    result = grounding_accuracy([sample])
    assert math.isnan(result["grounding"]) and result["words"] == 0 and result["unmatched"] == 0
    assert all(math.isnan(v) for v in result["attribute_grounding"].values())


def test_peak_pixel_on_non_square_grid_and_image():
    # grid H=2, W=4 over an 80x40 image: cells are 20x20; cell 5 = row 1, col 1 -> centre (30, 30).
    row = np.zeros(8)
    row[5] = 1.0
    assert peak_pixel(row, grid=(2, 4), image_size=(80, 40)) == (30.0, 30.0)


def test_box_border_counts_as_inside():
    # cell 0 of a 2x2 grid over 64x64 has centre (16, 16), exactly on this box's corner.
    obj = SceneObject(shape="square", color="red", size="big", box=(16, 16, 40, 40))
    att = np.array([[1.0, 0.0, 0.0, 0.0]])
    sample = GroundingSample(
        tokens=["square"], attention=att, grid=(2, 2), image_size=(64, 64), objects=[obj]
    )
    assert grounding_accuracy([sample])["grounding"] == 1.0


def test_phrase_helpers():
    tokens = ["a", "red", "circle", ",", "a", "blue", "square", "and", "and"]
    assert split_phrases(tokens) == [[0, 1, 2], [4, 5, 6]]
    assert match_phrase(["a", "red", "circle"], [RED_CIRCLE, BLUE_SQUARE]) == 0
    assert match_phrase(["red", "blue", "circle"], [RED_CIRCLE]) is None  # contradictory colours
    assert match_phrase(["a", "thing"], [RED_CIRCLE]) is None  # no attribute words


def test_wrong_attention_shape_is_a_clear_error():
    sample = GroundingSample(
        tokens=["a", "circle"], attention=np.ones((2, 9)), grid=GRID, image_size=IMAGE, objects=[]
    )
    with pytest.raises(ValueError, match=r"H\*W = 4\*4 = 16"):
        grounding_accuracy([sample])
    short = GroundingSample(
        tokens=["a", "circle"], attention=np.ones((1, 16)), grid=GRID, image_size=IMAGE, objects=[]
    )
    with pytest.raises(ValueError, match="T >= 2 tokens"):
        grounding_accuracy([short])


def test_object_dict_missing_keys_is_a_clear_error():
    sample = GroundingSample(
        tokens=["circle"],
        attention=np.ones((1, 16)),
        grid=GRID,
        image_size=IMAGE,
        objects=[{"shape": "circle"}],
    )
    with pytest.raises(ValueError, match=r"lacks keys \['box', 'color', 'size'\]"):
        grounding_accuracy([sample])
