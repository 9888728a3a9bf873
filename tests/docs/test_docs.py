"""The documentation: every command the README and the getting-started page mark as runnable runs, the
site builds with ``mkdocs build --strict``, and the README stays a short product page.

A fenced ``bash`` or ``python`` block is runnable when the line before it is an HTML comment starting
with ``<!-- runnable`` (invisible on GitHub and on the site). Blocks run in a temporary folder holding
``docs`` and ``examples`` (links to the repository's, so ``docs/models/...`` resolves) and ``photo.jpg`` (a Flickr8k dev
photo when FLICKR8K_ROOT (``support.FLICKR8K``) has one, else a generated image). Substitutions, so the suite stays fast:

- ``make train`` (5 minutes) runs as its tiny equivalent, ``scripts/train_and_caption.py`` with
  ``debug=tiny trainer.max_steps=4 trainer.val_check_interval=2`` (the same script and recipe
  overrides, a few steps at the tests' sizes);
- ``captioning-train ...`` gets ``debug=tiny`` and a ``hydra.run.dir`` in the temporary folder appended
  (so ``trainer.max_epochs=1`` trains the tiny model for one epoch).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from support import FLICKR8K, REPO

BIN = Path(sys.executable).parent
RUNNABLE_PAGES = ["README.md", "docs/getting-started.md"]
FENCE = re.compile(r"<!-- runnable[^>]*-->\s*\n```(bash|python)[^\n]*\n(.*?)\n```", re.S)
DATED = re.compile(r"\b20\d\d-\d\d-\d\d\b")
FLICKR_PHOTO = FLICKR8K / "Flicker8k_Dataset" / "1000268201_693b08cb0e.jpg"


def runnable_blocks(page: str) -> list[tuple[str, str]]:
    return FENCE.findall((REPO / page).read_text(encoding="utf-8"))


BLOCKS = [
    (page, i, lang, code) for page in RUNNABLE_PAGES for i, (lang, code) in enumerate(runnable_blocks(page))
]


def substitute(line: str, tmp: Path) -> str:
    """The tiny equivalent of one documented command line (see the module docstring)."""
    if line.strip() == "make train":
        return (
            f"{sys.executable} {REPO / 'scripts/train_and_caption.py'} debug=tiny trainer.max_steps=4 "
            f"trainer.val_check_interval=2 hydra.run.dir={tmp / 'make_train_run'}"
        )
    if line.strip().startswith("captioning-train"):
        return f"{line} debug=tiny hydra.run.dir={tmp / 'train_run'}"
    return line


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "docs").symlink_to(REPO / "docs")
    (tmp_path / "examples").symlink_to(REPO / "examples")  # the README's example photo
    photo = tmp_path / "photo.jpg"
    if FLICKR_PHOTO.exists():
        shutil.copy(FLICKR_PHOTO, photo)
    else:
        rng = np.random.default_rng(0)
        Image.fromarray(rng.integers(0, 255, (224, 224, 3), dtype=np.uint8)).save(photo)
    return tmp_path


def test_the_pages_mark_their_commands_runnable():
    counts = {page: len(runnable_blocks(page)) for page in RUNNABLE_PAGES}
    assert counts["README.md"] >= 2 and counts["docs/getting-started.md"] >= 4, counts


@pytest.mark.slow
@pytest.mark.parametrize(
    ("page", "index", "lang", "code"), BLOCKS, ids=[f"{p}-{i}-{lang}" for p, i, lang, _ in BLOCKS]
)
def test_a_runnable_block_runs(page, index, lang, code, workdir):
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "WANDB_MODE": "offline"}
    env["HF_HUB_OFFLINE"] = "1"
    if lang == "python":
        script = workdir / "block.py"
        script.write_text(code, encoding="utf-8")
        cmd = [sys.executable, str(script)]
    else:
        lines = [substitute(line, workdir) for line in code.splitlines() if line.strip()]
        cmd = ["bash", "-euo", "pipefail", "-c", "\n".join(lines)]
    result = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, (
        f"{page} block {index} failed:\n{code}\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
    )
    if "caption" in code:
        assert result.stdout.strip(), "no caption printed"
    if "photo_attention.png" in code:
        assert (workdir / "photo_attention.png").stat().st_size > 0


def test_the_site_builds_strictly(tmp_path):
    """Without ``--quiet``: it lowers the log level below warnings, and ``--strict`` then counts none (a
    broken link passed that way)."""
    if shutil.which("mkdocs", path=str(BIN)) is None:
        pytest.skip("mkdocs is not installed (it comes with the dev extra: pip install -e '.[dev]')")
    result = subprocess.run(
        [str(BIN / "mkdocs"), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    assert "WARNING" not in result.stdout + result.stderr, result.stderr[-5000:]
    assert (tmp_path / "site/index.html").exists()


def test_the_readme_is_short_and_has_no_dated_lines():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text) <= 15_000, f"README.md has {len(text)} characters (at most 15,000)"
    dated = [line for line in text.splitlines() if DATED.search(line)]
    assert not dated, f"dated lines belong in docs/experiments/: {dated}"


RESULTS = REPO / "docs" / "results"
# where this project's measurements ran: a page or result file naming one points at nothing a reader has
MACHINE_PATH = re.compile(r"/work/|/tmp/(pytest-of|hostile)")


def test_every_result_file_has_content_and_no_machine_path():
    """A result file the docs cite is never empty (a copy that truncated it would read as a result), its
    JSON parses, and it (like every page) names no path of the machine it was measured on."""
    import json

    files = sorted(p for p in RESULTS.rglob("*") if p.suffix in {".json", ".md", ".csv"} and p.is_file())
    assert len(files) > 100
    pages = [REPO / "README.md", *(p for p in (REPO / "docs").rglob("*.md") if RESULTS not in p.parents)]
    bad = []
    for path in [*files, *pages]:
        text = path.read_text()
        if not text.strip():
            bad.append(f"{path}: empty")
            continue
        if path.suffix == ".json":
            try:
                json.loads(text)
            except ValueError as err:
                bad.append(f"{path}: not JSON ({err})")
        if MACHINE_PATH.search(text):
            bad.append(f"{path}: names a machine path ({MACHINE_PATH.search(text).group(0)})")
    assert not bad, "\n".join(bad)


# A pytest command in a page (a code block's line, continuations joined, or inline code): the command a
# reader runs to check a claim
PYTEST_COMMAND = re.compile(r"\bpytest\s([^`\n]*)")
TEST_PATH = re.compile(r"^tests/\S+\.py(::\S+)?$")


def _documented_test_selections() -> list[tuple[str, list[str], str]]:
    """(page, the test files or node ids, the -k expression) of every documented ``pytest ... -k ...``."""
    found = []
    for page in [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").rglob("*.md"))]:
        text = page.read_text(encoding="utf-8").replace("\\\n", " ")
        for command in PYTEST_COMMAND.findall(text):
            if not re.search(r"(^|\s)-k\b", command):
                continue  # prose may follow the word ("pytest (the demo's browser test)")
            words = shlex.split(command, comments=True)
            expr = next((words[k + 1] for k, w in enumerate(words[:-1]) if w == "-k"), None)
            paths = [w for w in words if TEST_PATH.match(w)]
            if expr is not None:
                assert paths, f"{page.name}: pytest {command}: -k without a test file to select from"
                found.append((page.relative_to(REPO).as_posix(), paths, expr))
    return found


def test_every_test_selection_a_page_documents_selects_a_test():
    """A ``-k`` that matches nothing runs nothing and passes ("deselected"), so a renamed test left the
    docs pointing readers to a check that no longer exists (the DDP resume test's name did). The files are
    collected once, and a one-word ``-k`` is found in a test's id; any other (``"a and not b"``, a marker's
    name) is asked of pytest itself."""
    selections = _documented_test_selections()
    assert len(selections) >= 5  # the cluster guide's commands at least

    def collect(*args: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        return [line for line in done.stdout.splitlines() if "::" in line]

    ids = collect(*sorted({p.split("::")[0] for _, paths, _ in selections for p in paths}))
    empty = []
    for page, paths, expr in selections:
        ours = [
            i for i in ids if any(i == p or i.startswith(f"{p}::") or i.startswith(f"{p}[") for p in paths)
        ]
        word = re.fullmatch(r"\w+", expr) and any(expr.lower() in i.lower() for i in ours)
        if not (word or collect(*paths, "-k", expr)):
            empty.append(f"{page}: pytest {' '.join(paths)} -k {expr!r} selects no test")
    assert not empty, "\n".join(empty)
