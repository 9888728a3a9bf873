"""The experiments package (experiments/, its own pyproject.toml) beside the library: the captioning wheel
holds none of it, its own wheel holds all of it, and scripts/ holds only its thin command lines."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from support import REPO


def _wheel(project: Path, out: Path) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "wheel", "--no-deps",
           "--no-build-isolation", "--no-index", "-q", "-w", str(out), str(project)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    return zipfile.ZipFile(wheel).namelist()


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A copy of what the wheels are built from (building in the clone would leave build/ there)."""
    src = tmp_path_factory.mktemp("src")
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for folder in ("captioning", "experiments", "scripts"):
        shutil.copytree(REPO / folder, src / folder, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    return src


def test_the_captioning_wheel_holds_no_experiment(clone, tmp_path) -> None:
    names = _wheel(clone, tmp_path)
    assert "captioning/conf/train.yaml" in names and "captioning/inference/captioner.py" in names
    outside = [n for n in names if not n.startswith(("captioning/", "captioning-"))]
    assert not outside, f"the runtime wheel holds more than captioning/: {outside[:10]}"


def test_the_experiments_wheel_holds_every_module_and_no_library(clone, tmp_path) -> None:
    names = set(_wheel(clone / "experiments", tmp_path))
    modules = {
        f"experiments/{p.relative_to(REPO / 'experiments').as_posix()}"
        for p in (REPO / "experiments").rglob("*.py")
    }
    assert "experiments/benchmarks/timing.py" in modules and "experiments/compare.py" in modules
    assert modules <= names, sorted(modules - names)
    assert not [n for n in names if n.startswith("captioning/")]


def _main_modules() -> set[str]:
    return {
        p.stem
        for p in (REPO / "experiments").glob("*.py")
        if any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in ast.parse(p.read_text()).body)
    }


def test_scripts_are_thin_command_lines_of_the_experiments_with_a_main() -> None:
    launchers = {p.stem: p for p in (REPO / "scripts").glob("*.py")}
    assert set(launchers) == _main_modules()  # one per command, none for the shared parts (sweep_jobs, ...)
    for name, path in launchers.items():
        tree = ast.parse(path.read_text())
        imports = [n for n in tree.body if isinstance(n, ast.ImportFrom)]
        assert [(n.module, [a.name for a in n.names]) for n in imports] == [(f"experiments.{name}", ["main"])]
        assert len(path.read_text().splitlines()) <= 10, (
            f"{path.name}: the code belongs in experiments/{name}.py"
        )


def test_a_launcher_runs_its_experiment(tmp_path) -> None:
    """From another folder, as the docs run them: the installed (or PYTHONPATH) package, no sys.path edit."""
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_architecture.py"), "--check"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
