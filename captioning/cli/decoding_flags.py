"""The decoding flags (HF ``generate`` names: ``--num-beams 5``, ``--do-sample`` ...) of every sub-command
that decodes: ``caption`` and ``demo``-like commands take only the flags; ``evaluate`` and ``tune`` take
them beside Hydra overrides of captioning/conf/eval.yaml (``decoding.num_beams=5``), which stay accepted.
A flag becomes the same ``decoding.KEY=VALUE`` override; a flag and an override of the same key that
disagree are one error line naming both. Nothing heavy is imported: the check runs before torch."""

from __future__ import annotations

import argparse

DECODING_FLAGS = ("num_beams", "num_return_sequences", "do_sample", "temperature", "top_k", "top_p",
                  "length_penalty", "no_repeat_ngram_size", "repetition_penalty", "max_new_tokens",
                  "allow_unk", "hard_attention")  # fmt: skip

_HELP = {
    "num_beams": "beams per image (1 = greedy)",
    "num_return_sequences": "n-best list / samples per image",
    "do_sample": "sample instead of searching",
    "temperature": None,
    "top_k": "sample among the k most likely words (0 = all)",
    "top_p": "nucleus sampling mass (1.0 = off)",
    "length_penalty": "score = log p / length**penalty",
    "no_repeat_ngram_size": "block repeated n-grams (0 = off)",
    "repetition_penalty": "CTRL penalty (1.0 = off)",
    "max_new_tokens": "the most tokens generated",
    "allow_unk": "let <unk> be generated (default: masked, as HF's bad_words_ids)",
    "hard_attention": "hard-attention models: read the most likely cell, or the expected context Σ α_i a_i "
    "(refused for a soft-attention model, where it would change nothing)",
}
_TYPES = {"num_beams": int, "num_return_sequences": int, "temperature": float, "top_k": int, "top_p": float,
          "length_penalty": float, "no_repeat_ngram_size": int, "repetition_penalty": float,
          "max_new_tokens": int}  # fmt: skip


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
    for name in DECODING_FLAGS:
        if name in skip:
            continue
        if name in ("do_sample", "allow_unk"):
            g.add_argument(flag(name), action="store_true", default=None, help=_HELP[name])
        elif name == "hard_attention":
            g.add_argument(flag(name), choices=("cell", "expected"), default=None, help=_HELP[name])
        else:
            g.add_argument(flag(name), type=_TYPES[name], default=None, help=_HELP[name])
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
