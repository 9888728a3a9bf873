"""What a user's YAML config file may hold: bounded before Hydra composes it.

User YAML files are read by PyYAML, which expands aliases without a bound (a 2 KB "billion laughs" file
grows past gigabytes): :func:`check_yaml_files` composes each file of a user's config folder without
expanding it and refuses, in one line naming the file and line, a file over :data:`MAX_YAML_BYTES`, one
that would expand past :data:`MAX_YAML_NODES` nodes or holds a recursive alias, a YAML tag (``!!python/...``)
and a syntax error. Folders that ``hydra.searchpath`` adds (on the command line or in a checked file) are
checked too.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from captioning.errors import ConfigError

MAX_YAML_BYTES = 1_000_000  # the project's largest config file is a few KB
MAX_YAML_NODES = 100_000  # after alias expansion; a config is a few hundred
_PLAIN_TAGS = {
    f"tag:yaml.org,2002:{t}"
    for t in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp", "merge")
}


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
