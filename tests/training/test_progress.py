"""Progress of long work (captioning/progress.py): a tqdm bar on a terminal, a line per few seconds
elsewhere, nothing for short work or with --quiet."""

from __future__ import annotations

import io

import pytest

from captioning import progress
from captioning.cli.main import main


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _loud(monkeypatch):
    monkeypatch.delenv(progress.QUIET_ENV, raising=False)
    progress.set_quiet(False)
    yield
    progress.set_quiet(False)


def test_not_a_terminal_gets_periodic_lines_with_eta_and_a_last_line(monkeypatch) -> None:
    monkeypatch.setenv(progress.INTERVAL_ENV, "0")
    stream = io.StringIO()
    with progress.bar(10, "decoding", stream=stream) as report:
        for _ in range(10):
            report.update(1)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 10  # 9 while it runs (every update, at interval 0), then the last one
    assert lines[0].startswith("decoding: 1/10 img (10%)") and "ETA" in lines[0]
    assert lines[-1].startswith("decoding: 10/10 img (100%), done in")


def test_short_work_prints_nothing_and_a_terminal_gets_tqdm() -> None:
    stream = io.StringIO()
    with progress.bar(10, "decoding", stream=stream) as report:  # well under the 5 s interval
        report.update(10)
    assert stream.getvalue() == ""
    from tqdm import tqdm

    report = progress.bar(10, "decoding", stream=Terminal())
    assert isinstance(report, tqdm)
    report.close()


def test_batches_counts_each_batch_when_the_next_is_asked(monkeypatch, capsys) -> None:
    monkeypatch.setenv(progress.INTERVAL_ENV, "0")
    assert list(progress.batches(5, 2, "memory")) == [0, 2, 4]
    err = capsys.readouterr().err.splitlines()
    assert [line.split(" ")[1] for line in err] == ["2/5", "4/5", "5/5"]


def test_quiet_and_the_environment_silence_it(monkeypatch) -> None:
    monkeypatch.setenv(progress.INTERVAL_ENV, "0")
    for quiet in ("flag", "env"):
        if quiet == "flag":
            progress.set_quiet()
        else:
            progress.set_quiet(False)
            monkeypatch.setenv(progress.QUIET_ENV, "1")
        stream = io.StringIO()
        with progress.bar(10, "decoding", stream=stream) as report:
            report.update(5)
        assert stream.getvalue() == ""


def test_evaluate_reports_decoding_and_scoring_unless_quiet(good_checkpoint, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(progress.INTERVAL_ENV, "0")
    args = ["evaluate", "--checkpoint", str(good_checkpoint), "--out-dir", str(tmp_path / "e")]
    args += ["data.test.num_images=6", "batch_size=2", "tokenizer=simple"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "decoding: 2/6 img (33%)" in err and "decoding: 6/6 img (100%), done in" in err
    assert "scoring: " in err
    assert main([*args, "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "decoding:" not in err and "scoring:" not in err
