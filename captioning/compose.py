"""Where the Hydra configs live, and composing them outside a Hydra run (evaluate, compare, tests, bench)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, open_dict

CONFIG_DIR = str(Path(__file__).resolve().parent / "conf")  # captioning/conf/, shipped inside the package


def compose_config(config_name: str, overrides: list[str]) -> tuple[DictConfig, dict[str, str]]:
    """Compose ``captioning/conf/<config_name>.yaml`` with Hydra overrides, outside a Hydra run.

    Returns the config (without Hydra's own node) and the chosen option of every config group
    (``{"data": "flickr8k", "model/decoder": "soft", ...}``).
    """
    from captioning.config_safety import check_targets
    from captioning.config_yaml import check_yaml_files, searchpath_overrides
    from captioning.errors import ConfigError

    unreadable = unreadable_override(overrides)
    if unreadable:
        raise ConfigError(unreadable)
    check_yaml_files(searchpath_overrides(overrides))  # a user's config folder: bounded YAML, no tags
    refused = None
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        try:
            cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
        except RecursionError:  # Hydra's report of a defaults cycle is a RecursionError's 2,500 lines
            raise ConfigError(
                f"config {config_name!r}: its defaults lists include each other (a cycle), so it never "
                "finishes composing"
            ) from None
        except ConfigCompositionException as err:
            refused = err
    if refused is not None:  # after the block: naming the nearest key composes again
        line = unknown_key_message(config_name, refused, overrides)
        if line is None:
            raise refused
        raise ConfigError(line) from refused
    check_targets(cfg)  # every _target_ (the hydra node's too) on the allow-list, before anything is built
    choices = {k: str(v) for k, v in cfg.hydra.runtime.choices.items() if not k.startswith("hydra/")}
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg, choices


def unreadable_override(overrides: list[str]) -> str | None:
    """The first override Hydra's grammar cannot read (``paths.flickr8k=~/f8k``, ``...=/data/f8k(1)``), as one
    line saying how to write it; None when all parse. Hydra's own report names no fix."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_override(override)
        except HydraException as err:  # the grammar's errors (OverrideParseException is one)
            why = str(err).split("\n")[0].split(" See https://")[0]
            return (
                f"{override}: Hydra's override grammar cannot read it ({why}); {_how_to_write(override, why)}"
            )
    return None


def _how_to_write(override: str, why: str) -> str:
    """The fix for an override the grammar refused: quoting, where the value is what it cannot read."""
    import re

    key, equals, value = override.partition("=")
    grammar = "see https://hydra.cc/docs/advanced/override_grammar/basic"
    # the key itself, or a sweep function (range, choice ...) misspelt: not a quoting matter
    if not equals or not re.fullmatch(r"[+~]{0,2}[\w.@/-]+", key) or "function" in why.lower():
        return grammar
    if value == "~" or value.startswith("~/"):  # the shell expands ~ after = only in its own variables
        return f"write the home folder as $HOME, which the shell expands: {key}=$HOME{value[1:]}"
    if any(c in value for c in ",'\""):  # a sweep's values, or quotes inside: each value quoted on its own
        return f"quote each value for Hydra inside the shell's quotes ({grammar})"
    return f"quote it for Hydra inside the shell's quotes: '{key}=\"{value}\"'"


def unknown_key_message(
    config_name: str,
    err: Exception,
    overrides: list[str],
    compose_job: Callable[[list[str]], DictConfig] | None = None,
    where: str | None = None,
) -> str | None:
    """For an override of a key the config lacks, one line with the closest existing key ("did you mean
    trainer.max_epochs?") instead of Hydra's advice to add it with ``+`` (a key nothing would read); for a
    misspelt group option (``model/decoder=sofft``), the closest option and the options; None for another
    refusal.

    ``compose_job(overrides)`` composes the config as the command line does (a ``--config-dir`` of the
    user's own configs included); by default the package's ``config_name``. ``where`` says where to read
    the keys when none is close."""
    import difflib
    import re

    from omegaconf import OmegaConf

    option = re.search(
        r"Could not find '([^']+)/([^'/]+)'\s+Available options in '([^']+)':\s*(.*)", str(err), re.S
    )
    if option and option.group(1) == option.group(3):  # a misspelt group option: model/decoder=sofft
        group, name = option.group(1), option.group(2)
        available = option.group(4).split("Config search path")[0].split()  # Hydra lists its path after
        close = difflib.get_close_matches(name, available, 1, 0.6)
        hint = f"; did you mean {group}={close[0]}?" if close else ""
        # not on the command line: a config's defaults list chose it (an experiment's `override /model/decoder:`)
        typed = any(o.lstrip("+~").replace(" ", "") == f"{group}={name}" for o in overrides)
        where = "" if typed else " (chosen in a config file's defaults list, not on the command line)"
        return f"{group}={name}{where}: no such option{hint} (options: {', '.join(available)})"
    match = re.search(r"Could not override '([^']+)'", str(err))
    if not match:
        return None
    wrong = match.group(1)
    if where is None:
        where = (
            "`captioning-train --cfg job`"
            if config_name == "train"
            else f"captioning/conf/{config_name}.yaml"
        )
    if compose_job is None:

        def compose_job(job: list[str]) -> DictConfig:
            return compose_config(config_name, job)[0]

    try:
        cfg = compose_job([a for a in overrides if a.split("=", 1)[0].lstrip("+~") != wrong])
        close = difflib.get_close_matches(
            wrong, _leaf_keys(OmegaConf.to_container(cfg, resolve=False)), 1, 0.7
        )
    except Exception:  # noqa: BLE001 - another mistake among the overrides: this one is still named
        close = []
    hint = f"did you mean {close[0]}?" if close else f"see {where} for the keys"
    return f"{wrong}: no such config key; {hint} (a leading + would add a key that nothing reads)"


def _leaf_keys(node: object, prefix: str = "") -> list[str]:
    if not isinstance(node, dict):
        return [prefix]
    return [key for k, v in node.items() for key in _leaf_keys(v, f"{prefix}.{k}" if prefix else str(k))]
