"""Where the Hydra configs live, and composing them outside a Hydra run (evaluate, compare, tests, bench)."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

CONFIG_DIR = str(Path(__file__).resolve().parent / "conf")  # captioning/conf/, shipped inside the package


def compose_config(config_name: str, overrides: list[str]) -> tuple[DictConfig, dict[str, str]]:
    """Compose ``captioning/conf/<config_name>.yaml`` with Hydra overrides, outside a Hydra run.

    Returns the config (without Hydra's own node) and the chosen option of every config group
    (``{"data": "flickr8k", "model/decoder": "soft", ...}``).
    """
    from captioning.config_safety import check_targets
    from captioning.config_yaml import check_yaml_files, searchpath_overrides

    check_yaml_files(searchpath_overrides(overrides))  # a user's config folder: bounded YAML, no tags
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        try:
            cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
        except RecursionError:  # Hydra's report of a defaults cycle is a RecursionError's 2,500 lines
            from captioning.errors import ConfigError

            raise ConfigError(
                f"config {config_name!r}: its defaults lists include each other (a cycle), so it never "
                "finishes composing"
            ) from None
    check_targets(cfg)  # every _target_ (the hydra node's too) on the allow-list, before anything is built
    choices = {k: str(v) for k, v in cfg.hydra.runtime.choices.items() if not k.startswith("hydra/")}
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg, choices
