"""Where Flickr8k is looked for: a neutral default (``data/flickr8k``, or FLICKR8K_ROOT), and a missing copy
reported in one line that names the key to set (no data needed: the folders here do not exist)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from captioning.data.readers import DatasetError, read_flickr8k
from captioning.data.sources import flickr8k_split

from support import compose_train
from support.hostile import assert_one_line


def test_the_default_is_data_flickr8k_unless_flickr8k_root_is_set(monkeypatch) -> None:
    monkeypatch.delenv("FLICKR8K_ROOT", raising=False)
    assert compose_train(["data=flickr8k"]).paths.flickr8k == "data/flickr8k"
    monkeypatch.setenv("FLICKR8K_ROOT", "/somewhere/flickr8k")
    cfg = compose_train(["data=flickr8k"])
    assert (
        cfg.paths.flickr8k == "/somewhere/flickr8k" and cfg.data.train.records.root == "/somewhere/flickr8k"
    )


@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_a_missing_copy_names_paths_flickr8k_and_flickr8k_root(tmp_path, split) -> None:
    missing = tmp_path / "no_flickr8k"
    source = flickr8k_split(str(missing), split)  # refuses on use, like a split the copy lacks
    with pytest.raises(DatasetError) as raised:
        len(source)
    with pytest.raises(DatasetError) as read:
        read_flickr8k(missing, split)
    for message in (str(raised.value), str(read.value)):
        assert message.startswith(f"{missing}: not found;")
        assert "paths.flickr8k=PATH" in message and "FLICKR8K_ROOT" in message


def test_evaluate_on_a_missing_copy_says_which_key_to_set(good_checkpoint, tmp_path) -> None:
    missing = tmp_path / "no_flickr8k"
    cmd = [sys.executable, "-m", "captioning.cli.main", "evaluate", "--checkpoint", str(good_checkpoint),
           "data=flickr8k", f"paths.flickr8k={missing}", "--out-dir", str(tmp_path / "eval")]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert_one_line(done.stderr, str(missing), "paths.flickr8k", "FLICKR8K_ROOT")
    assert not (tmp_path / "eval" / "scores.json").exists()
