"""The closed registry of network classes (captioning.models.registry): filled by ``@register`` in the
modules that define the classes, complete whenever it can be read, one class per name; a class a test
registers is rebuilt from a checkpoint, and refused again once the test has put the registry back."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from captioning.checkpoints.format import CHECKPOINT_KEY
from captioning.checkpoints.load import CheckpointError, load_checkpoint
from captioning.models.attention.soft import AdditiveAttention
from captioning.models.encoders import SmallCNN
from captioning.models.registry import MODEL_CLASSES, constructor_defaults, register, with_defaults
from captioning.training.build import net_config

from support import DECODERS, REPO, TINY, compose_train
from support.corpus import write_checkpoint
from support.registry import restored_registry

MODELS = REPO / "captioning" / "models"


class Probe(AdditiveAttention):
    """Soft attention under a name of its own; registered only inside the tests that need it."""


PROBE = f"{Probe.__module__}.Probe"


def registered_in_source() -> set[str]:
    """The names the ``@register`` decorators of captioning/models/ give, read from the source."""
    names = set()
    for path in MODELS.rglob("*.py"):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for decorator in getattr(node, "decorator_list", ()) if isinstance(node, ast.ClassDef) else ():
                if isinstance(decorator, ast.Call) and ast.unparse(decorator.func) == "register":
                    (keyword,) = decorator.keywords  # register(module="...")
                    names.add(f"{ast.literal_eval(keyword.value)}.{node.name}")
                elif ast.unparse(decorator) == "register":
                    names.add(f"{module}.{node.name}")
    return names


def test_importing_the_registry_alone_gives_every_decorated_class() -> None:
    """Python runs captioning/models/__init__.py first, which imports every module that registers."""
    code = "import json; from captioning.models.registry import MODEL_CLASSES; print(json.dumps(sorted(MODEL_CLASSES)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    expected = registered_in_source()
    assert json.loads(result.stdout) == sorted(expected), "captioning/models/__init__.py does not import them"
    assert {"captioning.models.caption_model.CaptionModel", "captioning.models.encoders.SmallCNN"} <= expected
    assert len(expected) == 13


def test_a_name_means_one_class(model_registry) -> None:
    register(Probe)
    twin = type("Probe", (AdditiveAttention,), {"__module__": Probe.__module__})
    for again in (Probe, twin):  # the same class twice, or another one under its name
        with pytest.raises(ValueError, match=f"{PROBE} is registered already"):
            register(again)
    assert MODEL_CLASSES[PROBE] is Probe


def test_the_map_is_read_only() -> None:
    with pytest.raises(TypeError):
        MODEL_CLASSES[PROBE] = Probe  # type: ignore[index]
    assert PROBE not in MODEL_CLASSES


def test_module_names_the_public_path(model_registry) -> None:
    moved = register(module="captioning.models.attention")(type("Moved", (AdditiveAttention,), {}))
    assert moved.__module__ == "captioning.models.attention"
    assert MODEL_CLASSES["captioning.models.attention.Moved"] is moved
    # the encoders, defined in encoders/<family>.py, keep the path configs and feature caches name
    assert SmallCNN.__module__ == "captioning.models.encoders"
    assert MODEL_CLASSES["captioning.models.encoders.SmallCNN"] is SmallCNN


def test_a_registered_class_is_rebuilt_from_a_checkpoint_until_the_registry_is_put_back(
    good_checkpoint: Path, tmp_path: Path
) -> None:
    checkpoint = torch.load(good_checkpoint, weights_only=True)
    additive = "captioning.models.attention.soft.AdditiveAttention"
    text = checkpoint[CHECKPOINT_KEY]["net_config"]
    assert additive in text
    checkpoint[CHECKPOINT_KEY]["net_config"] = text.replace(additive, PROBE)
    path = tmp_path / "probe.ckpt"
    torch.save(checkpoint, path)
    with restored_registry():
        register(Probe)
        attention = load_checkpoint(path).net.decoder.attention
        assert type(attention) is Probe
    assert PROBE not in MODEL_CLASSES
    with pytest.raises(CheckpointError, match=f"_target_ is '{PROBE}'; only the network classes"):
        load_checkpoint(path)


def targets(node) -> list[dict]:
    """Every node of a config tree that names a class (``_target_``)."""
    if isinstance(node, list):
        return [found for value in node for found in targets(value)]
    if not isinstance(node, dict):
        return []
    return [node] * ("_target_" in node) + [found for value in node.values() for found in targets(value)]


@pytest.mark.parametrize("decoder", DECODERS)
def test_a_saved_network_config_states_every_constructor_argument(decoder: str) -> None:
    """A checkpoint's config must say what its network was built with, the defaults included: a key it
    lacks is then only ever a checkpoint of an earlier version (captioning.models.legacy)."""
    cfg = compose_train([*TINY, f"model/decoder={decoder}", "model.decoder.dropout=0.3"])
    saved = OmegaConf.to_container(net_config(cfg.model, 40))
    nodes = targets(saved)
    assert len(nodes) >= 3  # the model, its encoder, its decoder (an LSTM's attention layer besides)
    for node in nodes:
        defaults = constructor_defaults(node["_target_"])
        assert defaults.keys() <= node.keys(), f"{node['_target_']} lacks {defaults.keys() - node.keys()}"
    assert saved["decoder"]["dropout"] == 0.3 and saved["decoder"]["vocab_size"] == 40  # given values kept


def test_a_key_a_user_config_leaves_out_is_saved_with_todays_default(tmp_path: Path) -> None:
    """A user's decoder yaml without ``alibi`` builds a Transformer with ALiBi (today's default); the saved
    config says so, so loading does not read the missing key as a pre-ALiBi checkpoint's ``False``."""
    path = write_checkpoint(
        tmp_path / "own.ckpt", extra=["model/decoder=transformer", "~model.decoder.alibi"]
    )
    text = torch.load(path, weights_only=True)[CHECKPOINT_KEY]["net_config"]
    assert OmegaConf.create(text).decoder.alibi is True
    assert load_checkpoint(path).net.decoder.alibi is True


def test_with_defaults_fills_registered_nodes_only() -> None:
    given = {
        "_target_": "captioning.models.encoders.SmallCNN",
        "out_dim": 64,
        "parts": [{"_target_": "somewhere.Unregistered", "x": 1}, 7],
    }
    filled = with_defaults(given)
    assert filled["out_dim"] == 64 and filled["stride"] == constructor_defaults(given["_target_"])["stride"]
    assert filled["parts"] == given["parts"]  # an unknown class's node is left as it was
    assert "stride" not in given  # a copy: the caller's config is unchanged
    assert constructor_defaults("somewhere.Unregistered") == {}
