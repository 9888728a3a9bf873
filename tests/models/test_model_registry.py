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

from captioning.checkpoints.format import CHECKPOINT_KEY
from captioning.checkpoints.load import CheckpointError, load_checkpoint
from captioning.models.attention.soft import AdditiveAttention
from captioning.models.encoders import SmallCNN
from captioning.models.registry import MODEL_CLASSES, register

from support import REPO
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
    assert len(expected) == 12


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
