"""One source of defaults: every value a config file gives a ``captioning`` constructor's argument equals
that argument's default in the code, so reading either tells the truth about a default run.

Checked over every YAML file of captioning/conf (every group, experiments and debug settings included), for
every ``_target_`` node the file itself writes (a file that only composes another, like
``model/decoder/hard_gumbel.yaml`` over ``soft``, changes values on purpose: that is its variant). Third-party
targets (torch's AdamW, Lightning's Trainer), and our subclasses that keep their constructor, have their own
defaults and are not compared.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hydra.utils import get_object

from captioning.compose import CONFIG_DIR

CONF = Path(CONFIG_DIR)
FILES = sorted(CONF.rglob("*.yaml"))

# A group option whose point is to differ from the constructor's default in these arguments (a dataset's
# image size and batch sizes, a split, the device of a GPU recipe): file -> {node path: arguments}. Every
# other value a file writes must equal the code's default. ``out_dim`` of the pretrained encoders is
# derived from the network when left out (default None); the files state it because the decoder's
# ``feature_dim`` interpolates it, and the encoder checks that the two agree.
OWN_VALUES: dict[str, dict[str, set[str]]] = {
    "data/synthetic.yaml": {"": {"eval_batch_size"}, "val": {"split"}, "test": {"split"}},
    **{
        f"data/{name}.yaml": {
            "": {"image_size", "batch_size", "eval_batch_size", "num_workers", "min_word_count"}
        }
        for name in ("captions_json", "flickr8k", "own")
    },
    "data/coco.yaml": {"": {"image_size", "num_workers", "min_word_count"}, "val": {"num_images"}},
    "data/karpathy.yaml": {"": {"image_size", "num_workers", "min_word_count"}},
    "experiment/coco_base.yaml": {"data.feature_cache": {"batch_size", "device"}},
    **{f"model/encoder/{name}.yaml": {"": {"out_dim"}} for name in ("efficientnet_lite0", "resnet101")},
}


def target_nodes(node: Any, where: str = "") -> Iterator[tuple[str, dict]]:
    """(dotted path, node) for every mapping with a ``_target_`` below ``node``."""
    if isinstance(node, dict):
        if "_target_" in node:
            yield where, node
        for key, value in node.items():
            yield from target_nodes(value, f"{where}.{key}" if where else str(key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from target_nodes(value, f"{where}[{i}]")


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value  # YAML has lists where code has tuples


def differences(path: Path) -> list[str]:
    """``file node.key: YAML value != code default`` for every value of ``path`` that disagrees."""
    name = path.relative_to(CONF).as_posix()
    found = []
    for where, node in target_nodes(yaml.safe_load(path.read_text()) or {}):
        target = node["_target_"]
        if not str(target).startswith("captioning."):
            continue
        built = get_object(target)
        constructor = built.__init__ if inspect.isclass(built) else built
        if not getattr(inspect.getmodule(constructor), "__name__", "").startswith("captioning."):
            continue  # a subclass that keeps a third-party constructor (EarlyStopping): its defaults are theirs
        parameters = inspect.signature(built).parameters
        allowed = OWN_VALUES.get(name, {}).get(where, set())
        for key, value in node.items():
            parameter = parameters.get(key)
            if key.startswith("_") or parameter is None or parameter.default is inspect.Parameter.empty:
                continue  # a required argument (the config must give it), or one the node passes on
            if isinstance(value, dict | list) or (
                isinstance(value, str) and ("${" in value or value == "???")
            ):
                continue  # another node (checked on its own), an interpolation, a value filled in later
            same = _plain(parameter.default) == value and type(parameter.default) is type(value)
            same = same or (type(value) in (int, float) and type(parameter.default) in (int, float)
                            and float(value) == float(parameter.default))  # fmt: skip
            if not same and key not in allowed:
                found.append(
                    f"{name} {where or '<top>'}.{key}: YAML {value!r} != {target}'s default {parameter.default!r}"
                )
    return found


@pytest.mark.parametrize("path", FILES, ids=[p.relative_to(CONF).as_posix() for p in FILES])
def test_config_values_equal_the_constructor_defaults(path: Path) -> None:
    assert differences(path) == []


def test_the_check_sees_a_disagreeing_default(tmp_path: Path) -> None:
    """The comparison itself: a soft-attention file with another attention_dim is reported, by name."""
    (tmp_path / "model").mkdir()
    bad = tmp_path / "model" / "additive.yaml"
    bad.write_text(
        "_target_: captioning.models.attention.soft.AdditiveAttention\n_partial_: true\nattention_dim: 512\n"
    )
    global CONF
    saved, CONF = CONF, tmp_path
    try:
        assert differences(bad) == [
            "model/additive.yaml <top>.attention_dim: YAML 512 != "
            "captioning.models.attention.soft.AdditiveAttention's default 128"
        ]
    finally:
        CONF = saved


def test_the_own_values_table_names_only_values_that_differ() -> None:
    """An entry of OWN_VALUES whose value now equals the default is stale: the table stays the short list of
    deliberate differences."""
    stale = []
    for name, nodes in OWN_VALUES.items():
        data = yaml.safe_load((CONF / name).read_text())
        for where, node in target_nodes(data):
            parameters = inspect.signature(get_object(node["_target_"])).parameters
            for key in nodes.get(where, ()):
                if key in node and _plain(parameters[key].default) == node[key]:
                    stale.append(f"{name} {where}.{key}")
    assert stale == []
