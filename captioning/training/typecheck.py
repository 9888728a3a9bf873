"""Every config value checked against the annotation of the argument it becomes, before anything is built.

A config node with ``_target_`` becomes a call of that class or function, so its keys are arguments whose
types the code already states (``gate: bool``, ``seed: int``, ``lr: float``). A value Hydra parsed into
another type (``gate=maybe`` is the string 'maybe', ``batch_size=null`` is None) would otherwise be used
as given: truthy strings switch options on, None fails deep inside the first batch. Bounds declared in
the signature (``Annotated[int, AtLeast(1)]``, captioning.bounds) are checked here too. Only plain
annotations are checked (bool, int, float, str, None and their unions); anything richer (modules,
callables, literals) is left to the constructor, except that null is refused wherever the annotation
does not allow None (``model.decoder.attention=null`` would otherwise fail as "'NoneType' object is not
callable").
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator
from typing import Any

from hydra.utils import get_object

from captioning.bounds import annotations_of, bound_problem

PLAIN = (bool, int, float, str, type(None))
NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", type(None): "null"}


def _unannotated(annotation: Any) -> Any:
    """``Annotated[int, AtLeast(1)]`` -> ``int`` (its bound is checked on its own: captioning.bounds)."""
    return typing.get_args(annotation)[0] if typing.get_origin(annotation) is typing.Annotated else annotation


def _plain_types(annotation: Any) -> tuple[type, ...] | None:
    """The plain types an annotation allows, or None when it allows anything richer (not checked)."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    options = tuple(_unannotated(o) for o in (typing.get_args(annotation) if union else (annotation,)))
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
    """Argument name -> annotation of the class or function ``target`` names (captioning.bounds)."""
    try:
        return annotations_of(get_object(target))
    except Exception:  # noqa: BLE001 - an unimportable target is reported when it is built
        return {}


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
        elif problem := bound_problem(f"{where}.{key}", value, hints[key]):  # its signature's bound
            yield problem
