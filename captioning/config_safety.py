"""What a composed config may build, and what a user's YAML file may hold: checked before anything runs.

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

User YAML files are read by PyYAML, which expands aliases without a bound (a 2 KB "billion laughs" file
grows past gigabytes): :func:`check_yaml_files` composes each file of a user's config folder without
expanding it and refuses, in one line naming the file and line, a file over :data:`MAX_YAML_BYTES`, one
that would expand past :data:`MAX_YAML_NODES` nodes or holds a recursive alias, a YAML tag (``!!python/...``)
and a syntax error.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

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
    "captioning.training.lit_module",
    "captioning.training.scst",
    "captioning.training.schedules",
    "captioning.checkpoints.save.AtomicCheckpointIO",
    "captioning.inference.consensus",
)

# Packages partly allowed above: allowed_targets cannot widen them (torch.save, captioning.writes ...).
CURATED = frozenset({p.split(".")[0] for p in (*CLASSES, *FUNCTIONS)} | {"omegaconf"})

SETTING = "allowed_targets"  # the top-level config key that adds a user's own packages

MAX_YAML_BYTES = 1_000_000  # the project's largest config file is a few KB
MAX_YAML_NODES = 100_000  # after alias expansion; a config is a few hundred
_PLAIN_TAGS = {
    f"tag:yaml.org,2002:{t}"
    for t in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp", "merge")
}


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


def _expanded_size(node: yaml.Node, path: str, memo: dict[int, int], active: set[int]) -> int:
    """How many nodes ``node`` becomes once its aliases are expanded (shared nodes counted once each use)."""
    if id(node) in memo:
        return memo[id(node)]
    mark = node.start_mark
    if id(node) in active:
        raise ConfigError(f"{path}:{mark.line + 1}: a recursive YAML alias (a node containing itself)")
    if node.tag not in _PLAIN_TAGS:
        raise ConfigError(
            f"{path}:{mark.line + 1}: YAML tag {node.tag.replace('tag:yaml.org,2002:', '!!')} is not allowed in "
            "a config (plain values, lists and mappings only)"
        )
    active.add(id(node))
    children: list[yaml.Node] = []
    if isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    elif isinstance(node, yaml.MappingNode):
        children = [n for pair in node.value for n in pair]
    size = 1
    for child in children:
        size += _expanded_size(child, path, memo, active)
        if size > MAX_YAML_NODES:
            raise ConfigError(
                f"{path}:{mark.line + 1}: its YAML aliases expand to over {MAX_YAML_NODES:,} values "
                "(an alias bomb?); a config needs a few hundred"
            )
    active.discard(id(node))
    memo[id(node)] = size
    return size


def check_yaml_file(path: Path) -> Any:
    """The file's content once it has passed the bounds above (else one :class:`ConfigError` line)."""
    try:
        size = path.stat().st_size
        if size > MAX_YAML_BYTES:
            raise ConfigError(f"{path}: {size:,} bytes; a config file may have at most {MAX_YAML_BYTES:,}")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot be read as UTF-8 text ({err})") from None
    try:
        documents = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: YAML syntax error: {err.problem or err.context}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: YAML syntax error: {' '.join(str(err).split())}") from None
    total = 0
    for doc in documents:
        if doc is not None:
            total += _expanded_size(doc, str(path), {}, set())
            if total > MAX_YAML_NODES:
                raise ConfigError(
                    f"{path}: expands to over {MAX_YAML_NODES:,} values; a config needs a few hundred"
                )
    return yaml.safe_load(text) if len(documents) == 1 else None  # bounded now


def _folder(entry: str) -> Path | None:
    """A search-path entry's folder (``file://`` or a plain path); None for ``pkg://`` (installed code)."""
    entry = entry.strip().strip("'\"")
    if entry.startswith("pkg://") or not entry:
        return None
    return Path(entry.removeprefix("file://"))


def searchpath_overrides(overrides: Iterable[str]) -> list[Path]:
    """The folders that ``hydra.searchpath=[...]`` overrides add."""
    folders = []
    for arg in overrides:
        key, _, value = arg.partition("=")
        if key.lstrip("+~") == "hydra.searchpath":
            folders += [f for f in map(_folder, value.strip().strip("[]").split(",")) if f is not None]
    return folders


def check_yaml_files(folders: Iterable[Path | str]) -> None:
    """Every YAML file of the user's config folders, and of the folders their ``hydra.searchpath`` adds,
    within the bounds above; one :class:`ConfigError` line for the first that is not."""
    queue, seen = [Path(f) for f in folders], set()
    while queue:
        folder = queue.pop()
        if folder.resolve() in seen or not folder.is_dir():
            continue  # Hydra reports a missing folder itself
        seen.add(folder.resolve())
        for path in sorted([*folder.rglob("*.yaml"), *folder.rglob("*.yml")]):
            content = check_yaml_file(path)
            hydra_node = content.get("hydra") if isinstance(content, dict) else None
            extra = hydra_node.get("searchpath") if isinstance(hydra_node, dict) else None
            if isinstance(extra, list):
                queue += [f for f in map(_folder, map(str, extra)) if f is not None]


MAX_SWEEP_JOBS_CHECKED = 256  # a sweep's jobs are each composed and checked before the first starts


def _sweep_jobs(overrides: list[str]) -> list[list[str]]:
    """The overrides of every job of a ``-m`` sweep, as Hydra's basic sweeper will split them."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def command_line_problem(
    argv: list[str], config_dir: str, config_name: str, check_job: Any = None
) -> str | None:
    """A Hydra entry point's command line (``captioning-train --config-dir mine -m seed=0,1 ...``) checked
    as Hydra will compose it, before Hydra runs anything (its launcher and ``hydra.callbacks`` included):
    one line for user YAML beyond the bounds or a target not allowed, else None. A sweep's every job is
    composed and checked too, also by ``check_job(cfg)`` (the entry point's own config check), so that one
    invalid job is named before any job starts (a job failing at start-up would stop the whole sweep)."""
    import os

    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_automatic_config_search_path, get_args_parser
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    from captioning.errors import is_user_error, one_line

    try:
        args = get_args_parser().parse_args(argv)
    except SystemExit:  # a flag Hydra refuses: its own message, when it parses the line again
        return None
    folders = [Path(args.config_dir)] if args.config_dir else []
    try:
        check_yaml_files([*folders, *searchpath_overrides(args.overrides)])
    except ConfigError as err:
        return str(err)
    if args.help or args.hydra_help or args.info or args.shell_completion:
        return None  # nothing is built
    search_path = create_automatic_config_search_path(None, None, args.config_path or config_dir)
    if args.config_dir:
        search_path.prepend(
            provider="command-line",
            path=f"file://{os.path.abspath(args.config_dir)}",
            anchor=SearchPathQuery(provider="schema"),
        )
    try:
        hydra = Hydra.create_main_hydra2(task_name="check", config_search_path=search_path)
        cfg = hydra.compose_config(
            args.config_name or config_name,
            args.overrides,
            run_mode=RunMode.MULTIRUN if args.multirun else RunMode.RUN,
            with_log_configuration=False,
        )
        check_targets(cfg)
        if args.multirun:
            jobs = _sweep_jobs(args.overrides)
            for number, job in enumerate(jobs[:MAX_SWEEP_JOBS_CHECKED]):
                try:
                    job_cfg = hydra.compose_config(
                        args.config_name or config_name,
                        job,
                        run_mode=RunMode.RUN,
                        with_log_configuration=False,
                    )
                    check_targets(job_cfg)
                    if check_job is not None:
                        check_job(job_cfg)
                except Exception as err:  # noqa: BLE001 - a user's mistake names its job; a bug re-raised
                    if not is_user_error(err):
                        raise
                    swept = " ".join(a for a in job if a not in args.overrides)
                    return f"sweep job {number} of {len(jobs)} ({swept}): {one_line(err)}; no job was started"
    except ConfigError as err:
        return str(err)
    except RecursionError:
        name = args.config_name or config_name
        return f"config {name!r}: its defaults lists include each other (a cycle), so it never finishes composing"
    except Exception as err:  # noqa: BLE001 - a user's config mistake is one line; a bug is re-raised
        if not is_user_error(err):
            raise
        # without flags the entry point composes again and words its own report (did you mean ...?)
        return one_line(err) if any(a.startswith("-") for a in argv) else None
    finally:
        GlobalHydra.instance().clear()
    return None
