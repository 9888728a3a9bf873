"""The kept checkpoint's file name carries the metric that ranks it, for every data set and recipe; and the
tiny debug runs validate captions long enough to be scored on scenes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from captioning.compose import CONFIG_DIR
from captioning.data.synthetic import SceneObject, scene_captions

from support import compose_train

CONF = Path(CONFIG_DIR)
COMPOSITIONS = [[f"data={p.stem}"] for p in sorted((CONF / "data").glob("*.yaml"))] + [
    [f"experiment={p.stem}"]
    for p in sorted((CONF / "experiment").glob("*.yaml"))
    if not p.stem.endswith("_base")
]


@pytest.mark.parametrize("overrides", COMPOSITIONS, ids=lambda o: o[0])
def test_the_checkpoint_file_name_carries_the_monitored_metric(overrides):
    node = compose_train([*overrides, "paths.train_json=x", "paths.val_json=x", "paths.images=x"]).callbacks
    keep = node.model_checkpoint
    fields = re.findall(r"\{([^:}]+)", keep.filename)  # Lightning's {metric:format} fields
    assert keep.monitor in fields, (overrides, keep.filename, keep.monitor)


def test_debug_tiny_validates_whole_scene_captions():
    """max_new_tokens 6 cut "a small red circle in the ..." before its position words: objects, grounding
    and scene_score were 0 at every epoch, and the kept checkpoint was the untrained epoch 0's."""
    big = SceneObject(shape="circle", color="red", size="small", position="top left")
    longest = max(len(c.split()) for c in scene_captions((big, big)))
    assert compose_train(["debug=tiny"]).model.decoding.max_new_tokens >= longest
