"""Every config value checked against the annotation of the argument it becomes, before anything is built.

A config node with ``_target_`` becomes a call of that class or function, so its keys are arguments whose
types the code already states (``gate: bool``, ``seed: int``, ``lr: float``). A value Hydra parsed into
another type (``gate=maybe`` is the string 'maybe', ``batch_size=null`` is None) would otherwise be used
as given: truthy strings switch options on, None fails deep inside the first batch. Only plain
annotations are checked (bool, int, float, str, None and their unions); anything richer (modules,
callables, literals) is left to the constructor, except that null is refused wherever the annotation
does not allow None (``model.decoder.attention=null`` would otherwise fail as "'NoneType' object is not
callable").
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Iterator
from typing import Any

from hydra.utils import get_object

PLAIN = (bool, int, float, str, type(None))
NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", type(None): "null"}


def _plain_types(annotation: Any) -> tuple[type, ...] | None:
    """The plain types an annotation allows, or None when it allows anything richer (not checked)."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    options = typing.get_args(annotation) if union else (annotation,)
    return options if options and all(o in PLAIN for o in options) else None


def _allows_none(annotation: Any) -> bool:
    if annotation is Any or annotation is None or annotation is type(None):
        return True
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    return union and type(None) in typing.get_args(annotation)


def _readable(annotation: Any) -> str:
    """``AttentionLayer | Callable[..., AttentionLayer]``: the annotation without module paths."""
    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    return re.sub(r"\b(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*)", r"\1", text)


def fits(value: Any, allowed: tuple[type, ...]) -> bool:
    if value is None or isinstance(value, bool):
        return type(value) in allowed
    if isinstance(value, int):
        return int in allowed or float in allowed  # an integer is a fine float
    if isinstance(value, float):
        return float in allowed
    if isinstance(value, str):
        return str in allowed
    return False  # a list or mapping where one plain value is meant (embed_dim=[1,2])


def _hints(target: str) -> dict[str, Any]:
    """Argument name -> annotation, each evaluated on its own (a name imported only for type checkers
    leaves that one argument unchecked, not the whole signature)."""
    try:
        obj = get_object(target)
        function = obj.__init__ if inspect.isclass(obj) else obj
        parameters = inspect.signature(function).parameters
    except Exception:  # noqa: BLE001 - an unimportable target is reported when it is built
        return {}
    namespace = getattr(inspect.unwrap(function), "__globals__", {})
    hints = {}
    for name, parameter in parameters.items():
        annotation = parameter.annotation
        if isinstance(annotation, str):
            try:
                annotation = eval(annotation, dict(namespace))  # noqa: S307 - the code's own annotation text
            except Exception:  # noqa: BLE001
                continue
        if annotation is not inspect.Parameter.empty:
            hints[name] = annotation
    return hints


def type_problems(node: Any, where: str) -> Iterator[str]:
    """``key=value: expected ...`` for every argument of every ``_target_`` node below ``node`` (a resolved
    plain dict) whose value does not fit its annotation."""
    if not isinstance(node, dict):
        return
    hints = _hints(node["_target_"]) if isinstance(node.get("_target_"), str) else {}
    for key, value in node.items():
        if isinstance(value, dict):
            yield from type_problems(value, f"{where}.{key}")
            continue
        if key.startswith("_") or key not in hints or value == "???":  # ??? is filled in later
            continue
        allowed = _plain_types(hints[key])
        if allowed is None and value is None and not _allows_none(hints[key]):
            yield (
                f"{where}.{key}=null: expected {_readable(hints[key])}, which cannot be null "
                f"(argument of {node['_target_']})"
            )
        elif allowed is not None and not fits(value, allowed):
            expected = " or ".join(NAMES[t] for t in allowed)
            yield f"{where}.{key}={value!r}: expected {expected} (argument of {node['_target_']})"
