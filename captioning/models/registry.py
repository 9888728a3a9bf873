"""The closed name -> class map from which checkpoints are rebuilt (timm's ``@register_model``, closed).

A network part joins it with ``@register`` in the module that defines it; ``captioning/models/__init__.py``
imports every such module, and Python runs a package's ``__init__`` before any module inside it, so the
map is complete whenever this module can be imported. A checkpoint's network config names its classes by
``_target_``; only the names here are built, each exactly the class it names, so a crafted checkpoint can
neither call an arbitrary callable nor build a library object that is not a network part (a data source,
a scorer). ``tests/checkpoints/test_checkpoints.py`` checks that every config of ``captioning/conf/model/``
uses registered names; ``captioning.models.legacy`` reads earlier versions' names as today's.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from types import MappingProxyType
from typing import Any, TypeVar

T = TypeVar("T", bound=type)

_CLASSES: dict[str, type] = {}
MODEL_CLASSES = MappingProxyType(_CLASSES)  # read-only: a name joins only through @register


def register(cls: T | None = None, *, module: str | None = None) -> T | Callable[[T], T]:
    """Class decorator: ``cls`` joins the map as ``<module>.<qualname>``. ``module`` (default: the
    defining module) is the public path a package re-exports the class under; it becomes the class's
    ``__module__`` too, which feature-cache keys hash. A second class under a name is refused."""

    def add(cls: T) -> T:
        if module is not None:
            cls.__module__ = module
        name = f"{cls.__module__}.{cls.__qualname__}"
        if name in _CLASSES:
            raise ValueError(f"{name} is registered already (as {_CLASSES[name]!r}); a name means one class")
        _CLASSES[name] = cls
        return cls

    return add if cls is None else add(cls)


PLAIN = (type(None), bool, int, float, str)  # the defaults a saved config can state as YAML


def constructor_defaults(target: str) -> dict[str, Any]:
    """The plain-data defaults (None, bool, int, float, str) of the registered class ``target``'s
    constructor arguments; empty for a name that is not registered."""
    cls = _CLASSES.get(target)
    if cls is None:
        return {}
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {
        name: p.default
        for name, p in inspect.signature(cls).parameters.items()
        if p.kind in named and p.default is not inspect.Parameter.empty and isinstance(p.default, PLAIN)
    }


def with_defaults(node: Any) -> Any:
    """A copy of the network config ``node`` (dicts and lists) in which every node whose ``_target_`` is
    registered states each constructor argument it left out, with its default. A checkpoint saved so
    holds every value its network was built with: a default changed later cannot change what it means,
    and a key it lacks can only mean a checkpoint of an earlier version (``captioning.models.legacy``)."""
    if isinstance(node, list):
        return [with_defaults(value) for value in node]
    if not isinstance(node, dict):
        return node
    filled = {key: with_defaults(value) for key, value in node.items()}
    for name, default in constructor_defaults(str(node.get("_target_", ""))).items():
        filled.setdefault(name, default)
    return filled
