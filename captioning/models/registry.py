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

from collections.abc import Callable
from types import MappingProxyType
from typing import TypeVar

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
