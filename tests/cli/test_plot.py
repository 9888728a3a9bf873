"""`captioning plot`: a bad metrics file or out path is named in one line."""

from __future__ import annotations

from captioning.cli.main import main as captioning_main

from support.hostile import (
    assert_one_line,
)


def test_plot_names_a_metrics_file_that_is_not_utf8(tmp_path, capsys) -> None:
    (tmp_path / "metrics.csv").write_bytes(b"step,train/loss\n1,\xff\n")
    assert captioning_main(["plot", str(tmp_path)]) == 2
    assert_one_line(capsys.readouterr().err, "metrics.csv", "not UTF-8")


def test_plot_names_a_bad_row_and_checks_its_out_path(tmp_path, capsys) -> None:
    csv_file = tmp_path / "metrics.csv"
    csv_file.write_text("step,train/xent\n1,2.0\nabc,1.5\n")
    assert captioning_main(["plot", str(csv_file)]) == 2
    assert_one_line(capsys.readouterr().err, str(csv_file), "line 3: step='abc' is not a number")
    csv_file.write_text("step,train/xent,val/xent\n1,2.0,\n2,1.5,1.7\n")
    assert captioning_main(["plot", str(csv_file), "--out", str(tmp_path)]) == 2
    assert_one_line(capsys.readouterr().err, f"--out {tmp_path}: is a folder")
    assert captioning_main(["plot", str(csv_file), "--out", str(tmp_path / "new" / "c.png")]) == 0
    assert (tmp_path / "new" / "c.png").stat().st_size > 0
