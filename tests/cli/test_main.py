"""captioning/cli/main.py: a user's mistake that a command did not report itself is still one line, exit 2;
a bug keeps its traceback."""

from __future__ import annotations

import pytest

from captioning.cli import main as cli_main
from captioning.errors import ConfigError


def test_an_unreported_user_error_is_one_line_and_a_bug_is_not_hidden(monkeypatch, capsys, tmp_path):
    def config_mistake(args):
        raise ConfigError("callbacks.evil._target_=shutil.copyfile: not an allowed target")

    monkeypatch.setattr(cli_main.models, "run", config_mistake)
    assert cli_main.main(["models"]) == 2
    assert capsys.readouterr().err == (
        "captioning models: error: callbacks.evil._target_=shutil.copyfile: not an allowed target\n"
    )

    def bug(args):
        raise KeyError("a bug")

    monkeypatch.setattr(cli_main.models, "run", bug)
    with pytest.raises(KeyError, match="a bug"):
        cli_main.main(["models"])
