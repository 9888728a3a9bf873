"""The config groups that train.yaml picks by the names of other choices (``optional scoring: ${data}``,
``scoring/decoder``, ``recipe``, ``debug/decoder``, ``debug/encoder``): every file in them is named by existing
choices and changes the config it is picked for, every debug setting has its width file for every decoder, and
debug=tiny builds the network of every experiment (whatever its encoder)."""

from __future__ import annotations

import itertools

import pytest
import torch
import yaml
from omegaconf import OmegaConf

from support import CONF, DECODERS, compose_train

DATA = sorted(p.stem for p in (CONF / "data").glob("*.yaml"))
DEBUG = sorted(p.stem for p in (CONF / "debug").glob("*.yaml"))
ENCODERS = sorted(p.stem for p in (CONF / "model" / "encoder").glob("*.yaml"))

# group -> the choices a file's name must be made of, in train.yaml's order
PICKED_BY = {
    "scoring": [("data", DATA)],
    "scoring/decoder": [("data", DATA), ("model/decoder", DECODERS)],
    "recipe": [("model/decoder", DECODERS)],
    "debug/decoder": [("debug", DEBUG), ("model/decoder", DECODERS)],
    "debug/encoder": [("debug", DEBUG), ("model/encoder", ENCODERS)],
}
FILES = sorted((group, p.stem) for group in PICKED_BY for p in (CONF / group).glob("*.yaml"))


def choices_for(group: str, stem: str) -> list[str] | None:
    """The overrides whose names make ``stem`` (``synthetic_transformer`` -> data=synthetic,
    model/decoder=transformer), or None when no combination of existing choices does."""
    keys = PICKED_BY[group]
    for combo in itertools.product(*(names for _, names in keys)):
        if "_".join(combo) == stem:
            return [f"{key}={name}" for (key, _), name in zip(keys, combo)]
    return None


def leaves(node: object, path: str = ""):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaves(value, f"{path}.{key}" if path else str(key))
    else:
        yield path, node


@pytest.mark.parametrize(("group", "stem"), FILES, ids=[f"{g}/{s}" for g, s in FILES])
def test_each_picked_file_is_named_by_existing_choices_and_sets_its_values(group: str, stem: str) -> None:
    overrides = choices_for(group, stem)
    assert overrides, (
        f"captioning/conf/{group}/{stem}.yaml: no {' x '.join(k for k, _ in PICKED_BY[group])} makes this name"
    )
    text = (CONF / group / f"{stem}.yaml").read_text()
    package = text.split("# @package ", 1)[1].split()[0] if "# @package " in text else group.replace("/", ".")
    prefix = "" if package == "_global_" else package
    cfg = OmegaConf.to_container(compose_train(overrides))
    for path, value in leaves(yaml.safe_load(text)):
        where = f"{prefix}.{path}" if prefix else path
        got = OmegaConf.select(OmegaConf.create(cfg), where)
        assert got == value, (
            f"{group}/{stem}.yaml: {where} is {got!r} under {overrides}, the file says {value!r}"
        )


@pytest.mark.parametrize(("debug", "decoder"), list(itertools.product(DEBUG, DECODERS)))
def test_every_debug_setting_shrinks_every_decoder(debug: str, decoder: str) -> None:
    path = CONF / "debug" / "decoder" / f"{debug}_{decoder}.yaml"
    assert path.is_file(), (
        f"{path.relative_to(CONF.parent.parent)} is missing: debug={debug} would train {decoder} at full width"
    )
    full = compose_train([f"model/decoder={decoder}"]).model.decoder
    tiny = compose_train([f"model/decoder={decoder}", f"debug={debug}"]).model.decoder
    width = "ff_dim" if "ff_dim" in full else "hidden_dim"
    assert tiny[width] == 16 < full[width] and tiny.embed_dim == 16 < full.embed_dim


EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_debug_tiny_shrinks_the_data_of_every_experiment(experiment: str) -> None:
    """debug=tiny is composed after the experiment: its sizes win whatever data the experiment reads."""
    cfg = compose_train([f"experiment={experiment}", "debug=tiny"])
    sizes = [cfg.data[split].get("num_images") for split in ("train", "val")]
    assert sizes == [24, 8] and cfg.data.batch_size == 8 and cfg.data.num_workers == 0
    assert cfg.model.decoder.embed_dim == 16 and cfg.model.decoding.num_beams == 1


def changed_keys(before: object, after: object, path: str = "") -> set[str]:
    """Dotted paths of the leaves that differ between two plain configs (added, removed or changed)."""
    if isinstance(before, dict) and isinstance(after, dict):
        keys = set(before) | set(after)
        return {
            k
            for key in keys
            for k in changed_keys(before.get(key), after.get(key), f"{path}.{key}".lstrip("."))
        }
    return set() if before == after else {path}


def declared_keys(path) -> set[str]:
    """The dotted leaf paths a debug file sets (its defaults list aside), under its package."""
    text = path.read_text()
    package = text.split("# @package ", 1)[1].split()[0] if "# @package " in text else ""
    prefix = "" if package in ("", "_global_") else f"{package}."
    node = {k: v for k, v in (yaml.safe_load(text) or {}).items() if k != "defaults"}
    return {f"{prefix}{p}" for p, _ in leaves(node)}


@pytest.mark.parametrize(("data", "decoder"), list(itertools.product(DATA, DECODERS)))
def test_debug_tiny_changes_only_the_keys_it_declares(data: str, decoder: str) -> None:
    """Composing debug=tiny onto any data x decoder changes its own keys and nothing else (the logger, which it
    turns off, aside): what a tiny run tests is the real config."""
    base = [f"data={data}", f"model/decoder={decoder}"]
    full = OmegaConf.to_container(compose_train(base))
    tiny = OmegaConf.to_container(compose_train([*base, "debug=tiny"]))
    encoder = "small_cnn"  # model: default's encoder
    allowed = (
        declared_keys(CONF / "debug" / "tiny.yaml")
        | declared_keys(CONF / "debug" / "decoder" / f"tiny_{decoder}.yaml")
        | declared_keys(CONF / "debug" / "encoder" / f"tiny_{encoder}.yaml")
    )
    changed = {k for k in changed_keys(full, tiny) if not k.startswith("logger")}
    assert changed and changed <= allowed, sorted(changed - allowed)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_debug_tiny_builds_the_network_of_every_experiment(experiment: str) -> None:
    """debug=tiny shrinks the small CNN and leaves a pretrained encoder as its weights fix it, so a tiny run
    of any experiment builds (it once set the small CNN's ``width`` on EfficientNet-Lite: a TypeError)."""
    from captioning.training.build import build_net

    cfg = compose_train([f"experiment={experiment}", "debug=tiny"])
    net = build_net(cfg.model, vocab_size=50)
    grid = net.encode(torch.rand(1, 3, cfg.data.image_size, cfg.data.image_size))  # (1, L, D)
    assert grid.shape == (1, cfg.model.encoder.grid_size**2, cfg.model.encoder.out_dim)
