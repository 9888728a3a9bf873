"""The decoding options are declared once, as GenerationConfig's fields (default, help, bound or choices):
the checks of every option and the command line's flags are derived from them."""

from __future__ import annotations

import argparse
from dataclasses import fields

import pytest

from captioning.cli.decoding_flags import DECODING_FLAGS, add_decoding_arguments, decoding_options, flag
from captioning.decoding.config import HARD_ATTENTION_CONTEXTS, OPTION_CHECKS, GenerationConfig, check_option

FIELDS = {f.name: f for f in fields(GenerationConfig)}
BOUNDED = sorted(name for name, f in FIELDS.items() if f.metadata["bound"] is not None)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_decoding_arguments(parser)
    return parser


def test_every_field_is_a_flag_and_a_check_and_nothing_else() -> None:
    assert tuple(FIELDS) == DECODING_FLAGS and set(OPTION_CHECKS) == set(FIELDS)
    actions = {a.dest: a for a in _parser()._actions}
    for name, f in FIELDS.items():
        assert actions[name].option_strings == [flag(name)]
        assert actions[name].help == f.metadata["help"] and f.metadata["help"]
        assert actions[name].default is None  # unset: the checkpoint's own setting


def test_flags_parse_to_the_field_types() -> None:
    args = _parser().parse_args(
        ["--num-beams", "5", "--temperature", "0.7", "--do-sample", "--hard-attention", "expected"]
    )
    assert decoding_options(args) == {"num_beams": 5, "temperature": 0.7, "do_sample": True,
                                      "hard_attention": "expected"}  # fmt: skip
    assert type(decoding_options(args)["num_beams"]) is int
    with pytest.raises(SystemExit):
        _parser().parse_args(["--num-beams", "2.5"])  # an int field takes no fraction
    with pytest.raises(SystemExit):
        _parser().parse_args(["--hard-attention", "soft"])  # choices are the field's
    assert HARD_ATTENTION_CONTEXTS == ("cell", "expected")


@pytest.mark.parametrize("name", BOUNDED)
def test_each_check_is_the_bound_its_field_declares(name: str) -> None:
    """The ends of the declared bound pass, a step past an end fails; the message names the bound."""
    bound = FIELDS[name].metadata["bound"]
    integer = FIELDS[name].type == "int"
    step = 1 if integer else 1e-6
    for end, is_open, outside in ((bound.low, bound.low_open, -step), (bound.high, bound.high_open, step)):
        ok, expected = OPTION_CHECKS[name]
        assert ok(end) is (not is_open), (name, end)
        assert not ok(end + outside), (name, end + outside)
        with pytest.raises(ValueError) as info:
            check_option(name, end + outside)
        assert f"expected {bound.describe('an integer' if integer else 'a number')}" in str(info.value)
    assert OPTION_CHECKS[name][0](FIELDS[name].default)  # every default is valid
    if integer:
        assert not OPTION_CHECKS[name][0](True) and not OPTION_CHECKS[name][0](float(bound.low + 1))


def test_defaults_of_the_dataclass_are_the_field_declarations() -> None:
    assert GenerationConfig().to_dict() == {name: f.default for name, f in FIELDS.items()}
