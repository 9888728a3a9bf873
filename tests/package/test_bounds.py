"""Bounds declared once in a signature (captioning.bounds): the constructor enforces them, the start-up check
reads the same declaration, and validate.py keeps no second copy of a one-key rule."""

from __future__ import annotations

import inspect
from typing import Annotated

import pytest

from captioning.bounds import AtLeast, Between, annotations_of, bound_of, check_bounds
from captioning.data.datamodule import CaptionDataModule
from captioning.data.sources import SyntheticSource
from captioning.training import validate
from captioning.training.schedules import warmup_cosine
from captioning.training.typecheck import type_problems


@pytest.mark.parametrize(
    ("bound", "kind", "text", "inside", "outside"),
    [
        (AtLeast(1), "an integer", "an integer >= 1", [1, 7], [0, -3]),
        (Between(0, 1), "a number", "a number in [0, 1]", [0, 0.5, 1], [-0.1, 1.01]),
        (Between(0, 10, low_open=True, high_open=True), "a number", "a number in (0, 10)", [1e-9], [0, 10]),
        (Between(high=5), "an integer", "an integer <= 5", [5, -100], [6]),
    ],
)
def test_a_bound_describes_itself_and_holds_inside_only(bound, kind, text, inside, outside) -> None:
    assert bound.describe(kind) == text
    assert all(bound.holds(v) for v in inside) and not any(bound.holds(v) for v in outside)
    assert bound.holds("abc") and bound.holds(None)  # not a number: the type check's job, not the bound's


def test_bounds_are_found_inside_optional_and_every_bad_value_is_named() -> None:
    def f(a: Annotated[int, AtLeast(1)], b: Annotated[float, Between(0, 1)] | None = None, c: int = 0):
        return a, b, c

    hints = annotations_of(f)
    assert bound_of(hints["b"]) == (Between(0, 1), "a number") and bound_of(hints["c"]) == (None, "")
    check_bounds("x", f, {"a": 1, "b": None, "c": -5})  # None is allowed by the union; c has no bound
    with pytest.raises(
        ValueError, match=r"^x.a=0: expected an integer >= 1; x.b=2: expected a number in \[0, 1\]$"
    ):
        check_bounds("x", f, {"a": 0, "b": 2})


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: CaptionDataModule(SyntheticSource(2), SyntheticSource(2), batch_size=0),
            "data.batch_size=0",
        ),
        (
            lambda: CaptionDataModule(SyntheticSource(2), SyntheticSource(2), image_size=4),
            "data.image_size=4",
        ),
        (lambda: SyntheticSource(0), "num_images=0: expected an integer >= 1"),
        (lambda: warmup_cosine(None, 10, min_lr_ratio=1.5), "model.scheduler.min_lr_ratio=1.5"),
    ],
)
def test_constructors_enforce_their_declared_bounds(build, message) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        build()


def test_the_start_up_check_reads_the_same_declaration_under_the_config_key() -> None:
    node = {
        "_target_": "captioning.data.datamodule.CaptionDataModule",
        "batch_size": 0,
        "max_bad_fraction": 0.5,
        "train": {"_target_": "captioning.data.sources.SyntheticSource", "num_images": 0},
    }
    assert list(type_problems(node, "data")) == [
        "data.batch_size=0: expected an integer >= 1",
        "data.train.num_images=0: expected an integer >= 1",
    ]


@pytest.mark.parametrize("owner", [CaptionDataModule, SyntheticSource, warmup_cosine])
def test_validate_keeps_no_copy_of_a_bound_declared_in_a_signature(owner) -> None:
    source = inspect.getsource(validate)
    bounded = [name for name, hint in annotations_of(owner).items() if bound_of(hint)[0] is not None]
    assert bounded  # the owner declares some
    for name in bounded:
        assert f'.{name}"' not in source and f".{name}'" not in source, f"validate.py re-checks {name}"
