"""What a composed config may build: checked before anything runs.

Every ``_target_`` of a config becomes a call (``hydra.utils.instantiate``), so a config folder a user was
given (``--config-dir``, ``hydra.searchpath``) could otherwise call anything importable:
``shutil.copyfile``, ``builtins.open`` with mode ``w``, ``pathlib.Path.write_text``. Hydra's own blocklist
stops only a few names; here it is an allow-list, as the checkpoint loader's closed registry
(``captioning.models.registry``) is for checkpoints:

- a target must lie under one of :data:`CLASSES` (only classes there: Lightning's trainer, callbacks and
  loggers, torch's optimisers and layers, the Hydra launchers this project configures) or of
  :data:`FUNCTIONS` (classes and module-level functions: the project's own models, data, training
  callbacks and schedules), or of the config's top-level ``allowed_targets`` list (a user's own packages,
  ``allowed_targets=[mylab]``); the standard library can never be added there, nor the packages curated
  here widened (``allowed_targets=[torch]`` would allow ``torch.save``);
- the name must be public below the allowed prefix, and the object it names must be defined there too
  (``captioning.data.readers.Path.write_text`` names ``pathlib``'s method: refused);
- methods are refused (``Trainer.save_checkpoint`` with an instantiated trainer as its first argument).

Every node is checked (nested, in lists, ``_partial_`` ones, the ``hydra`` node's launcher and callbacks), and
all refusals come as one line naming each key and target (:class:`ConfigError`, exit status 2).

A user's YAML files are bounded before they are composed (:mod:`captioning.config_yaml`), and an entry
point's whole command line, each job of a sweep included, is checked by :mod:`captioning.config_command_line`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from captioning.errors import ConfigError

# Prefixes (whole dotted components) under which only classes may be built.
CLASSES = (
    "torch.optim",
    "torch.nn",
    "torch.utils.data",
    "pytorch_lightning.trainer",
    "pytorch_lightning.Trainer",
    "pytorch_lightning.callbacks",
    "pytorch_lightning.loggers",
    "pytorch_lightning.profilers",
    "pytorch_lightning.strategies",
    "pytorch_lightning.plugins",
    "pytorch_lightning.accelerators",
    "lightning.pytorch.trainer",
    "lightning.pytorch.Trainer",
    "lightning.pytorch.callbacks",
    "lightning.pytorch.loggers",
    "lightning.pytorch.profilers",
    "lightning.pytorch.strategies",
    "lightning.pytorch.plugins",
    "lightning.pytorch.accelerators",
    "lightning_fabric.plugins",
    "hydra_plugins.hydra_joblib_launcher",
    "hydra_plugins.hydra_submitit_launcher",
    "hydra._internal.core_plugins",  # Hydra's basic launcher and sweeper (its defaults)
)

# Prefixes under which classes and module-level functions may be built: the project's own config targets.
# Not the modules that write files or run commands (captioning.writes, data.files, checkpoints.export, cli).
FUNCTIONS = (
    "captioning.models",
    "captioning.data.datamodule",
    "captioning.data.sources",
    "captioning.data.readers",
    "captioning.data.captions_json",
    "captioning.data.own",
    "captioning.data.features",
    "captioning.data.transforms",
    "captioning.training.callbacks",
    "captioning.training.distributed.DDPStrategy",
    "captioning.training.lit_module",
    "captioning.training.scst",
    "captioning.training.schedules",
    "captioning.checkpoints.save.AtomicCheckpointIO",
    "captioning.inference.consensus",
)

# Packages partly allowed above: allowed_targets cannot widen them (torch.save, captioning.writes ...).
CURATED = frozenset({p.split(".")[0] for p in (*CLASSES, *FUNCTIONS)} | {"omegaconf"})

SETTING = "allowed_targets"  # the top-level config key that adds a user's own packages


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _user_prefixes(cfg: Any) -> tuple[list[str], list[str]]:
    """The valid entries of ``allowed_targets`` and a problem line for each refused one."""
    raw = cfg.get(SETTING) if hasattr(cfg, "get") else None
    if raw is None:
        return [], []
    if isinstance(raw, str) or not hasattr(raw, "__iter__"):
        return [], [f"{SETTING}={raw!r}: expected a list of package prefixes, e.g. [mylab]"]
    good, bad = [], []
    for entry in raw:
        text = str(entry).strip()
        root = text.split(".")[0]
        if not text or not all(part.isidentifier() for part in text.split(".")):
            bad.append(f"{SETTING}: {entry!r} is not a dotted package name (e.g. mylab or mylab.models)")
        elif root in sys.stdlib_module_names or root == "builtins":
            bad.append(
                f"{SETTING}: {text!r} is part of Python's standard library, which configs may not call"
            )
        elif root in CURATED:  # torch.save, captioning.data.files.write_text_atomically ...
            bad.append(
                f"{SETTING}: {text!r}: what configs may build from {root} is chosen here "
                "(captioning/config_safety.py) and cannot be widened; name your own packages"
            )
        else:
            good.append(text)
    return good, bad


def _problem(target: str, class_prefixes: Iterable[str], function_prefixes: Iterable[str]) -> str | None:
    """Why ``target`` may not be built, or None."""
    match = [(p, False) for p in class_prefixes if _under(target, p)]
    match += [(p, True) for p in function_prefixes if _under(target, p)]
    if not match:
        return "not an allowed target"
    prefix, functions_too = max(match, key=lambda m: len(m[0]))
    below = target[len(prefix) :].lstrip(".")
    if any(part.startswith("_") for part in below.split(".") if part):
        return "a private name"
    from hydra._internal.utils import _locate  # Hydra's own lookup: what instantiate would call

    try:
        obj = _locate(target)
    except Exception as err:  # noqa: BLE001 - an unknown name is refused here, not later in a traceback
        return f"cannot be imported ({' '.join(str(err).split())[:120]})"
    home = f"{getattr(obj, '__module__', '') or ''}.{getattr(obj, '__qualname__', '') or ''}"
    if isinstance(obj, type):
        pass
    elif not functions_too:
        return "not a class (only classes may be built from there)"
    elif not callable(obj) or "." in getattr(obj, "__qualname__", "."):
        return "not a class or module-level function"
    if not any(_under(home, p) for p in (*class_prefixes, *function_prefixes)):
        return f"names {home}, defined outside the allowed packages"
    return None


def _targets(node: Any, key: str = "") -> Iterable[tuple[str, Any]]:
    """(dotted key, value) of every ``_target_`` below ``node`` (a plain container)."""
    if isinstance(node, dict):
        for k, v in node.items():
            where = f"{key}.{k}" if key else str(k)
            if k == "_target_":
                yield where, v
            else:
                yield from _targets(v, where)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _targets(v, f"{key}[{i}]")


def _plain(cfg: Any) -> Any:
    """The config as plain containers, interpolations resolved where they can be (``???`` kept)."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if not isinstance(cfg, (DictConfig, ListConfig)):
        return cfg
    try:
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    except Exception:  # noqa: BLE001 - an interpolation that cannot resolve yet: check node by node
        raw = OmegaConf.to_container(cfg, resolve=False)
        keys = list(raw) if isinstance(raw, dict) else range(len(raw))
        values = {}
        for k in keys:
            try:
                values[k] = _plain(cfg[k])
            except Exception:  # noqa: BLE001 - unresolvable: its raw text is what is checked
                values[k] = raw[k]
        return values if isinstance(raw, dict) else [values[k] for k in keys]


# Hydra's logging configs (logging.config.dictConfig) build handlers by ``class`` and factories by ``()``:
# only these handlers, and a file handler only inside the run's folder, as Hydra's default writes its log.
LOG_HANDLERS = ("logging.StreamHandler", "logging.FileHandler", "logging.NullHandler")
_RUN_FOLDER = ("${hydra.runtime.output_dir}/", "${hydra:runtime.output_dir}/")


def _logging_problems(cfg: Any) -> list[str]:
    from omegaconf import DictConfig, OmegaConf

    hydra_node = cfg.get("hydra") if isinstance(cfg, DictConfig) else None
    if not isinstance(hydra_node, DictConfig):
        return []
    raw = OmegaConf.to_container(hydra_node, resolve=False)
    problems = []
    for section in ("job_logging", "hydra_logging"):
        for kind, entries in (raw.get(section) or {}).items():
            if not isinstance(entries, dict):
                continue
            for name, entry in entries.items():
                if not isinstance(entry, dict):
                    continue
                key = f"hydra.{section}.{kind}.{name}"
                if "()" in entry:
                    problems.append(f"{key}.()={entry['()']}: logging factories are not allowed in a config")
                handler = entry.get("class")
                if kind == "handlers" and handler is not None and handler not in LOG_HANDLERS:
                    problems.append(f"{key}.class={handler}: expected one of {', '.join(LOG_HANDLERS)}")
                filename = str(entry.get("filename", ""))
                if handler == "logging.FileHandler" and not filename.startswith(_RUN_FOLDER):
                    problems.append(
                        f"{key}.filename={filename}: a log file is written inside the run's folder "
                        "(${hydra.runtime.output_dir}/...)"
                    )
    return problems


def target_problems(cfg: Any) -> list[str]:
    """One ``key=target: why`` line for every ``_target_`` of ``cfg`` that is not allowed."""
    plain = _plain(cfg)
    users, problems = _user_prefixes(plain if isinstance(plain, dict) else {})
    functions = (*FUNCTIONS, *users)
    for key, value in _targets(plain):
        target = value.strip() if isinstance(value, str) else value
        if not isinstance(target, str) or not target:
            problems.append(f"{key}={value!r}: expected a dotted name of a class or function")
            continue
        why = _problem(target, CLASSES, functions)
        if why:
            problems.append(f"{key}={target}: {why}")
    return problems + _logging_problems(cfg)


def check_targets(cfg: Any) -> None:
    """Refuse, in one line naming each key and target, a config that would build anything not allowed."""
    problems = target_problems(cfg)
    if problems:
        raise ConfigError(
            "; ".join(problems)
            + f" (allowed: the project's classes and data readers, torch's optimisers and layers, Lightning's"
            f" trainer, callbacks and loggers, the Hydra launchers; add your own package with {SETTING}=[mylab])"
        )
