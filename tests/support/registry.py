"""The closed registry of network classes (``captioning.models.registry``) put back as it was."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def restored_registry() -> Iterator[None]:
    """Whatever registers inside the block (``@register``, run by an import or called) is removed at its end."""
    from captioning.models import registry

    before = dict(registry._CLASSES)
    try:
        yield
    finally:
        registry._CLASSES.clear()
        registry._CLASSES.update(before)
