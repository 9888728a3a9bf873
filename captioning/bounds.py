"""Bounds of numeric arguments, declared once, in the signature of the code that uses the value.

    def __init__(self, batch_size: Annotated[int, AtLeast(1)] = 64, max_bad_fraction: Annotated[float, Between(0, 1)] = 0.01)

The constructor enforces them (``check_bounds`` at its top, one line per bad value), and the training
start-up check reads the same declarations from the config's ``_target_`` classes
(``captioning.training.typecheck``), so a config with bad values is refused before any data is read, every
value named under its config key, and no second copy of a rule lives in the start-up check. Rules that span
several keys (a monitor that must be a logged metric, SCST needing ``init_from``) stay in
``captioning.training.validate``; so do the values of third-party constructors (Lightning's Trainer, torch's
AdamW), which accept some values silently (``limit_train_batches=0`` trains nothing and "succeeds"): their
bounds are declared below too (``CONFIG_BOUNDS``), with the sizes a network config may ask for
(``SIZE_BOUNDS``, shared by the start-up check and the checkpoint loader). This module is the one place a
bound on a value is written; everything that checks one reads it from here or from a signature that
uses these declarations.
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


# -- learning rates ------------------------------------------------------------------------------------
# AdamW takes any lr; 10 and above only diverges. The encoder's own rate is lr_scale x lr (its parameter
# group, CaptionLitModule.configure_optimizers), so lr_scale is bounded too, and their product is held to
# the bound on lr (captioning.training.validate): a scale cannot reach a rate lr itself may not be.
LEARNING_RATE = Between(0, 10, low_open=True, high_open=True)
LR_SCALE = Between(0, 10, low_open=True)


# -- values of third-party constructors and top-level keys ---------------------------------------------
# config key -> (the values allowed, what is expected). Lightning's Trainer and torch's AdamW accept some
# values silently (0 steps, 0 batches: "success" with nothing trained); these are refused at start-up.


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _within(bound: Between, integer: bool = False, null: bool = True):
    return lambda v: (null and v is None) or ((_is_int(v) if integer else _is_number(v)) and bound.holds(v))


CONFIG_BOUNDS: dict[str, tuple[Any, str]] = {
    "trainer.limit_train_batches": (
        lambda v: v is None or (_is_int(v) and v >= 1) or (isinstance(v, float) and 0 < v <= 1),
        "an integer >= 1 or a fraction in (0, 1]",
    ),
    "seed": (
        _within(Between(0, 2**32, high_open=True), integer=True, null=False),
        "an integer in [0, 2**32)",
    ),
    "model.optimizer.weight_decay": (_within(Between(0, 10, high_open=True)), "a number in [0, 10)"),
    "trainer.val_check_interval": (_within(Between(0, None, low_open=True)), "a number > 0"),
    **{
        key: (
            lambda v: v is None or (_is_int(v) and (v >= 1 or v == -1)),
            "an integer >= 1, or -1 for no limit (0 would train nothing)",
        )
        for key in ("trainer.max_epochs", "trainer.max_steps")
    },
    "trainer.log_every_n_steps": (_within(AtLeast(1), integer=True), "an integer >= 1"),
    "trainer.accumulate_grad_batches": (_within(AtLeast(1), integer=True), "an integer >= 1"),
    "trainer.gradient_clip_val": (_within(AtLeast(0)), "a number >= 0 or null"),
    "model.optimizer.lr": (_within(LEARNING_RATE), LEARNING_RATE.describe("a number")),
    "trainer.check_val_every_n_epoch": (_within(AtLeast(1), integer=True), "an integer >= 1 or null"),
    "trainer.num_sanity_val_steps": (
        _within(AtLeast(-1), integer=True),
        "an integer >= 0, or -1 for the whole validation set",
    ),
}


# -- sizes of a network ---------------------------------------------------------------------------------
# Bounds on the sizes a network config may ask for, shared by the start-up check of a training config
# (captioning.training.validate) and the loading of a checkpoint (captioning.models.size.bad_sizes):
# whatever trains can be loaded, and a crafted checkpoint cannot allocate terabytes or hang.
SIZE_BOUNDS = {
    "vocab_size": 1_000_000,
    "image_size": 2048,
    "grid_size": 64,
    "num_layers": 48,
    "num_heads": 64,
}
MAX_WIDTH = 16_384  # any other size: widths, *_dim, num_*
MAY_BE_ZERO = ("position_dim",)  # 0 = off

# Each size above is bounded alone; their product is not: vocabulary 120k x embedding 16,384, or a 16k-wide
# encoder, passes every bound and allocates gigabytes. The whole network is bounded too, counted on the
# meta device (shapes only, no memory) before anything is allocated.
MAX_PARAMETERS = 500_000_000  # ~2 GB of float32; the zoo's largest models have a few tens of millions
MAX_ACTIVATION = 2**30  # elements of one encoder activation for one image (4 GiB of float32)
