"""Helpers of the hostile-user corpus tests: stderr checks, broken checkpoints, a training run."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest
import torch

from captioning.checkpoints.format import CHECKPOINT_KEY

# A progress line of captioning/progress.py ("scoring: 7/8 metric (88%), 00:23 elapsed, ETA 00:03"): work
# lasting over 5 s prints them on stderr, which is fine; the error must still be one line beside them.
PROGRESS_LINE = re.compile(r"^[\w .-]+: \d+(/\d+)? \w+( \(\d+%\))?, ((\d+:)?\d\d:\d\d elapsed|done in )")


# The start-up notice of a run of a few steps that ends before its first validation (captioning/training/
# callbacks/no_validation_warning.py): the tests' short runs print it; it is not the error looked for.
NO_VALIDATION_WARNING = "warning: this run will never validate: "


def error_lines(err: str) -> list[str]:
    """The non-blank stderr lines, progress lines and the no-validation notice left out."""
    return [
        line
        for line in err.splitlines()
        if line.strip() and not PROGRESS_LINE.search(line) and not line.startswith(NO_VALIDATION_WARNING)
    ]


def assert_one_line(err: str, *culprits: str) -> str:
    """The one non-blank stderr line, asserted to name every culprit and to hold no traceback."""
    lines = error_lines(err)
    assert len(lines) == 1, lines
    assert "Traceback" not in err
    for culprit in culprits:
        assert culprit in lines[0], (culprit, lines[0])
    return lines[0]


def mutated(good: Path, out: Path, mutate) -> Path:
    """A copy of checkpoint ``good`` at ``out`` with ``mutate`` applied to its loaded dict."""
    checkpoint = torch.load(good, weights_only=True)
    mutate(checkpoint)
    torch.save(checkpoint, out)
    return out


def set_config(text: str):
    return lambda c: c[CHECKPOINT_KEY].__setitem__("net_config", text)


def replace_config(old: str, new: str):
    return lambda c: c[CHECKPOINT_KEY].__setitem__(
        "net_config", c[CHECKPOINT_KEY]["net_config"].replace(old, new)
    )


def poison_weights(c: dict) -> None:
    name = next(k for k in c["state_dict"] if k.endswith("weight"))
    c["state_dict"][name].view(-1)[0] = math.inf


def run_train(argv: list[str], run_dir: Path, monkeypatch) -> int:
    """``captioning-train debug=tiny ARGV`` in this process; its exit status."""
    from captioning.training.train import main as train_main

    monkeypatch.setattr(sys, "argv", ["captioning-train", "debug=tiny", *argv, f"hydra.run.dir={run_dir}"])
    with pytest.raises(SystemExit) as info:
        train_main()
    return info.value.code


def exported(good: Path, out: Path) -> Path:
    from captioning.checkpoints.export import export_checkpoint

    return export_checkpoint(good, out)


def set_first(suffix: str, value):
    """A mutation of a checkpoint dict: the first state-dict tensor whose name ends in ``suffix``."""

    def mutate(c: dict) -> None:
        name = next(k for k in c["state_dict"] if k.endswith(suffix))
        c["state_dict"][name] = value(c["state_dict"][name])

    return mutate
