"""The progress bar only on a terminal: a run whose stdout is a pipe, a file or a script's reader (a
background run, `make train`, `| tee log`) prints progress lines instead, with no override
(captioning/training/callbacks/progress_lines.py, ``bar_on``)."""

from __future__ import annotations

import io

from captioning.training.callbacks.progress_lines import bar_on
from captioning.training.train import train

from support import TINY, compose_train


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_only_on_a_terminal_and_only_when_asked_for() -> None:
    assert bar_on(True, Terminal()) and bar_on(None, Terminal())  # None: Lightning's default, on
    assert not bar_on(False, Terminal())  # trainer.enable_progress_bar=false on a terminal: lines
    assert not bar_on(True, io.StringIO())  # a pipe or a file
    assert not bar_on(True, object())  # a stream without isatty


def test_a_run_whose_output_is_not_a_terminal_prints_progress_lines(tmp_path, capsys) -> None:
    cfg = compose_train([*TINY, "trainer.max_steps=4", "callbacks.progress_lines.every_n_steps=2"], tmp_path)
    assert cfg.trainer.enable_progress_bar is True  # not switched off by the test: stdout is captured
    train(cfg)
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("step ")]
    assert [line.split(" epoch")[0] for line in lines] == ["step 2/4 (50%)", "step 4/4 (100%)"]
    assert "\r" not in out  # no bar redrawn in place
