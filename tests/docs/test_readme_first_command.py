"""The README's first command runs as written from the repository root, on the example photo the
repository ships (examples/cameraman.png, CC0), and prints what the README shows beneath it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIRST = re.compile(r"<!-- runnable[^>]*-->\s*\n```bash\n(.*?)\n```\s*\n```text\n(.*?)\n```", re.S)


@pytest.mark.slow
def test_the_readme_first_command_runs_from_the_repo_root_and_prints_what_it_shows():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    command, shown = FIRST.search(readme).groups()
    assert readme.index(command) < readme.index("<!-- runnable -->\n```python")  # the first command
    photo = re.search(r"captioning caption (\S+)", command).group(1)
    assert (REPO / photo).is_file() and "CC0" in (REPO / photo).with_name("README.md").read_text()
    overlay = REPO / re.search(r"--overlay (\S+)", command).group(1)
    if overlay.exists():
        pytest.skip(f"{overlay} exists already; the command would overwrite it")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("CAPTIONING_MODELS", None)
    try:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", command], cwd=REPO, env=env, capture_output=True, text=True,
            timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        assert overlay.stat().st_size > 10_000
    finally:
        overlay.unlink(missing_ok=True)
    assert (done.stdout + done.stderr).splitlines() == shown.splitlines()
