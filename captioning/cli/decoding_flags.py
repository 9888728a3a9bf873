"""The decoding flags (HF ``generate`` names: ``--num-beams 5``, ``--do-sample`` ...) of every sub-command
that decodes: ``caption`` and ``demo``-like commands take only the flags; ``evaluate`` and ``tune`` take
them beside Hydra overrides of captioning/conf/eval.yaml (``decoding.num_beams=5``), which stay accepted.
A flag becomes the same ``decoding.KEY=VALUE`` override; a flag and an override of the same key that
disagree are one error line naming both. Nothing heavy is imported: the check runs before torch.
The flags, their help and types are GenerationConfig's fields (captioning/decoding/config.py)."""

from __future__ import annotations

import argparse
from dataclasses import fields

from captioning.decoding.config import GenerationConfig  # a dataclass module: nothing heavy

# One flag per GenerationConfig field, in its order, with the help and type the field declares.
DECODING_FLAGS = tuple(f.name for f in fields(GenerationConfig))


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_decoding_arguments(
    p: argparse.ArgumentParser, *, skip: tuple[str, ...] = (), seed: bool = True, overrides: bool = False
) -> None:
    """One flag per HF ``generate`` option (unset: the checkpoint's), but those in ``skip`` (a command's own
    flags of that name, e.g. tune's grid); ``seed``: also ``--seed``."""
    title = "decoding (HF generate names; default: the checkpoint's"
    title += "; or Hydra overrides decoding.num_beams=5 ...)" if overrides else ")"
    g = p.add_argument_group(title)
    for f in fields(GenerationConfig):
        if f.name in skip:
            continue
        meta = f.metadata
        if f.type in ("bool", bool):  # a switch: present = true
            g.add_argument(flag(f.name), action="store_true", default=None, help=meta["help"])
        elif meta["choices"]:
            g.add_argument(flag(f.name), choices=tuple(meta["choices"]), default=None, help=meta["help"])
        else:  # the field's type parses the value; its bound is checked with the others (check_option)
            kind = {"int": int, "float": float, "str": str}[f.type] if isinstance(f.type, str) else f.type
            g.add_argument(flag(f.name), type=kind, default=None, help=meta["help"])
    if seed:
        g.add_argument(
            "--seed", type=int, default=None, help="seed for sampling (the same seed, the same captions)"
        )


def decoding_options(args: argparse.Namespace) -> dict:
    """The flags given; ``--do-sample`` without ``--num-beams`` samples with one beam whatever the checkpoint
    searches with (``GenerationConfig.replace``, shared with the API)."""
    return {name: getattr(args, name) for name in DECODING_FLAGS if getattr(args, name, None) is not None}


def override_value(text: str) -> object:
    """A Hydra override's value as the YAML scalar it stands for (null, true, 5, 0.5, 'cell')."""
    text = text.strip()
    lowered = text.lower()
    if lowered in ("null", "~", ""):
        return None
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip("'\"")


def _as_override(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def decoding_overrides(overrides: list[str]) -> dict[str, tuple[str, object]]:
    """``decoding.KEY=VALUE`` overrides (also ``+``/``++``-prefixed): KEY -> (the override, its value)."""
    found = {}
    for o in overrides:
        key, sep, value = o.partition("=")
        key = key.lstrip("+").strip()
        if sep and key.startswith("decoding."):
            found[key.removeprefix("decoding.")] = (o, override_value(value))
    return found


def merge_into_overrides(args: argparse.Namespace, grid: dict[str, str] | None = None) -> str | None:
    """Append the decoding flags given to ``args.overrides`` as ``decoding.KEY=VALUE``; the error line when
    a flag and an override of the same key disagree, or an override sets a key the command searches over
    (``grid``: key -> its flag), else None."""
    given = decoding_overrides(args.overrides)
    for key, (override, _) in given.items():
        if grid and key in grid:
            return (
                f"{override}: {key} is searched over here; give its values with {grid[key]} (e.g. "
                f"{grid[key]} {_as_override(given[key][1])})"
            )
    for key, value in decoding_options(args).items():
        if grid and key in grid:  # the command's own flag of that name (tune's list of values)
            continue
        if key not in given:
            args.overrides.append(f"decoding.{key}={_as_override(value)}")
            continue
        override, other = given[key]
        same = other == value or (
            isinstance(other, (int, float)) and not isinstance(other, bool) and float(other) == value
        )
        if not same:
            return (
                f"{flag(key)} {_as_override(value)} and the override {override} disagree; give the "
                "decoding option once"
            )
    return None
