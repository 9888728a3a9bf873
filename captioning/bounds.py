"""Bounds of numeric arguments, declared once, in the signature of the code that uses the value.

    def __init__(self, batch_size: Annotated[int, AtLeast(1)] = 64, max_bad_fraction: Annotated[float, Between(0, 1)] = 0.01)

The constructor enforces them (``check_bounds`` at its top, one line per bad value), and the training
start-up check reads the same declarations from the config's ``_target_`` classes
(``captioning.training.typecheck``), so a config with bad values is refused before any data is read, every
value named under its config key, and no second copy of a rule lives in the start-up check. Rules that span
several keys (a monitor that must be a logged metric, SCST needing ``init_from``) stay in
``captioning.training.validate``; so do the values of third-party constructors (Lightning's Trainer, torch's
AdamW), which accept some values silently (``limit_train_batches=0`` trains nothing and "succeeds").
"""

from __future__ import annotations

import inspect
import types
import typing
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Between:
    """``low <= value <= high`` (either end open with ``low_open`` / ``high_open``; None: unbounded)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def holds(self, value: Any) -> bool:
        if not isinstance(value, int | float) or isinstance(value, bool):
            return True  # not a number: the type check says so
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def describe(self, kind: str) -> str:
        """``an integer >= 1``, ``a number in [0, 1]``, ``a number in (0, 10)``."""
        if self.high is None:
            return f"{kind} {'>' if self.low_open else '>='} {_number(self.low)}"
        if self.low is None:
            return f"{kind} {'<' if self.high_open else '<='} {_number(self.high)}"
        left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
        return f"{kind} in {left}{_number(self.low)}, {_number(self.high)}{right}"


def AtLeast(low: float) -> Between:  # noqa: N802 - reads as a type in annotations
    return Between(low=low)


def _number(value: float | None) -> str:
    """``0.5``, ``100``, ``1e-4`` (as the bound would be written in code)."""
    if isinstance(value, float) and value and abs(value) < 1e-3:
        return f"{value:.0e}".replace("e-0", "e-")
    return f"{value:g}" if isinstance(value, float) else str(value)


def bound_of(annotation: Any) -> tuple[Between | None, str]:
    """The bound an annotation declares (``Annotated[int, AtLeast(1)]``, also inside ``| None``) and the
    kind of number it bounds ("an integer" / "a number"); (None, "") when it declares none."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for option in typing.get_args(annotation):
            bound, kind = bound_of(option)
            if bound is not None:
                return bound, kind
        return None, ""
    if typing.get_origin(annotation) is typing.Annotated:
        base, *extras = typing.get_args(annotation)
        for extra in extras:
            if isinstance(extra, Between):
                return extra, "an integer" if base is int else "a number"
    return None, ""


def annotations_of(function: Any) -> dict[str, Any]:
    """Argument name -> evaluated annotation of ``function`` (a class: its ``__init__``), each on its own (a
    name imported only for type checkers leaves that one argument out)."""
    function = function.__init__ if inspect.isclass(function) else function
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return {}
    namespace = dict(getattr(inspect.unwrap(function), "__globals__", {}))
    hints = {}
    for name, parameter in parameters.items():
        annotation = parameter.annotation
        if isinstance(annotation, str):
            try:
                annotation = eval(annotation, namespace)  # noqa: S307 - the code's own annotation text
            except Exception:  # noqa: BLE001
                continue
        if annotation is not inspect.Parameter.empty:
            hints[name] = annotation
    return hints


def bound_problem(key: str, value: Any, annotation: Any) -> str | None:
    """``key=value: expected an integer >= 1`` when ``value`` breaks the bound ``annotation`` declares."""
    bound, kind = bound_of(annotation)
    if bound is None or value is None or bound.holds(value):
        return None
    return f"{key}={value!r}: expected {bound.describe(kind)}"


def check_bounds(prefix: str, function: Any, values: dict[str, Any]) -> None:
    """Raise ValueError naming every argument in ``values`` (e.g. a constructor's ``locals()``) outside the
    bound its annotation in ``function`` declares; ``prefix`` names the config node ("data")."""
    hints = annotations_of(function)
    problems = [
        problem
        for name, value in values.items()
        if name in hints
        and (problem := bound_problem(f"{prefix}.{name}" if prefix else name, value, hints[name]))
    ]
    if problems:
        raise ValueError("; ".join(problems))
