"""The committed reference pages (docs/reference/cli.md, configs.md) are what scripts/gen_reference.py
generates from the code and the configs: a changed --help or config header needs the script rerun."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support import REPO


@pytest.mark.slow
def test_reference_pages_are_current() -> None:
    run = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_reference.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]


def test_a_config_options_header_comment_is_its_description(tmp_path) -> None:
    from experiments.gen_reference import header_comment

    path = tmp_path / "x.yaml"
    path.write_text("# @package _global_\n# Tiny sizes: a run of\n# a few steps.\ndefaults: []\n# not this\n")
    assert header_comment(path) == "Tiny sizes: a run of a few steps."
