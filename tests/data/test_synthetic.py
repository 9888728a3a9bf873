import numpy as np
import pytest

from captioning.data.sources import SyntheticSource
from captioning.data.synthetic import CANVAS, COLORS, POSITIONS, SHAPES, SIZES, render_scene
from captioning.data.tokenize import tokenize


def test_scenes_are_deterministic_per_seed():
    a, b, c = render_scene(7), render_scene(7), render_scene(8)
    assert np.array_equal(a.image, b.image) and a.captions == b.captions and a.objects == b.objects
    assert not np.array_equal(a.image, c.image)


@pytest.mark.parametrize("seed", range(40))
def test_scene_follows_the_spec(seed):
    scene = render_scene(seed)
    assert scene.image.shape == (CANVAS, CANVAS, 3) and scene.image.dtype == np.uint8
    assert len(scene.captions) == 5 and 1 <= len(scene.objects) <= 2
    assert len({o.position for o in scene.objects}) == len(scene.objects)  # different cells
    for obj in scene.objects:
        assert obj.shape in SHAPES and obj.color in COLORS and obj.size in SIZES and obj.position in POSITIONS
        x0, y0, x1, y1 = obj.box
        assert 0 <= x0 < x1 <= CANVAS and 0 <= y0 < y1 <= CANVAS
        # the box lies inside the object's 32×32 cell and has the size the word promises (±4 px)
        row, col = divmod(POSITIONS.index(obj.position), 3)
        assert col * 32 <= x0 and x1 <= (col + 1) * 32 and row * 32 <= y0 and y1 <= (row + 1) * 32
        assert abs(max(x1 - x0, y1 - y0) - SIZES[obj.size]) <= 4
        # the object's colour is where the box is: the centre pixel is close to the named colour
        cx, cy = int((x0 + x1) / 2), int((y0 + y1) / 2 + (2 if obj.shape == "triangle" else 0))
        assert np.abs(scene.image[cy, cx].astype(int) - np.array(COLORS[obj.color])).max() < 45
        for caption in scene.captions:  # every reference names every object fully
            assert obj.phrase in caption and obj.position in caption


def test_background_is_dark():
    scene = render_scene(3)
    corner = scene.image[:4, :4].astype(float)
    assert corner.mean() < 70


def test_synthetic_source_splits_do_not_overlap_and_are_stable():
    train, val = SyntheticSource(5, seed=0, split="train"), SyntheticSource(5, seed=0, split="val")
    assert not np.array_equal(train.scenes[0].image, val.scenes[0].image)
    longer = SyntheticSource(8, seed=0, split="train")
    assert np.array_equal(np.asarray(longer.image(4)), np.asarray(train.image(4)))
    assert all(tokenize(c) for i in range(len(train)) for c in train.captions(i))
    with pytest.raises(ValueError, match="split"):
        SyntheticSource(3, split="dev")


def test_shuffled_object_order_keeps_the_scenes_and_unties_the_first_object_from_reading_order():
    from captioning.metrics.objects import parse_mentions, score_caption

    plain = SyntheticSource(300, seed=0, split="train")
    shuffled = SyntheticSource(300, seed=0, split="train", shuffle_object_order=True)
    again = SyntheticSource(300, seed=0, split="train", shuffle_object_order=True)
    first_in_reading_order = {"plain": [0] * 5, "shuffled": [0] * 5}
    pairs = 0
    for i in range(len(plain)):
        a, b = plain.scenes[i], shuffled.scenes[i]
        assert np.array_equal(a.image, b.image) and a.objects == b.objects  # only the references change
        assert b.captions == again.captions(i)  # seeded by the scene
        for caption in b.captions:  # each still names every object right, and nothing else
            s = score_caption(caption, a.objects)
            assert (s["right"], s["extra"]) == (len(a.objects), 0), caption
        if len(a.objects) == 2:
            pairs += 1
            for name, scene in (("plain", a), ("shuffled", b)):
                for k, caption in enumerate(scene.captions):
                    first = parse_mentions(caption)[0]
                    first_in_reading_order[name][k] += first.shape == a.objects[0].shape and (
                        first.position == a.objects[0].position
                    )
    assert pairs > 100
    # The templates name the reading-order first object first in 4 of 5 references; shuffled, about half.
    assert first_in_reading_order["plain"] == [pairs, pairs, 0, pairs, pairs]
    for count in first_in_reading_order["shuffled"]:
        assert 0.35 < count / pairs < 0.65
