"""captioning/writes.py: the one writer of every command's output files, and the commands through it.

An output never replaces an input of its command, a model file of another kind, a folder or anything
that is not a regular file (a device, a pipe); it is written whole or not at all; a symbolic link is
written through (the link stays). Devices are never touched for real: a FIFO and links in tmp_path
stand in for /dev/null (tests run as root; the real one was once replaced by a file)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import torch

from captioning.cli.main import main as captioning_main
from captioning.writes import (
    BANK,
    EXPORT,
    SAFETENSORS,
    TRAINING_CHECKPOINT,
    OutputError,
    model_kind,
    output,
)

from support.hostile import assert_one_line, exported

GRID = ["--num-beams", "1", "--length-penalty", "0", "--no-repeat-ngram-size", "0"]
VAL = ["data=synthetic", "data.val.num_images=4", "feature_cache=false"]


def a_bank(path: Path) -> Path:
    from captioning.inference.caption_bank import CaptionBank, pooled

    refs = [["a red circle"], ["a blue square"]]
    CaptionBank(pooled(torch.randn(2, 4, 8)), refs, [0, 1], {"encoder": "x"}).save(path)
    return path


def fifo_and_link(tmp_path: Path, name: str) -> tuple[Path, Path]:
    fifo = tmp_path / f"pipe-{name}"
    os.mkfifo(fifo)
    link = tmp_path / f"link-{name}"
    link.symlink_to(fifo)
    return fifo, link


# ------------------------------------------------------------------------------------ the module itself


def test_model_files_are_told_apart_by_their_bytes(good_checkpoint, tmp_path) -> None:
    from safetensors.torch import save_file

    pickled = tmp_path / "legacy.pt"
    torch.save({"w": torch.ones(1)}, pickled, _use_new_zipfile_serialization=False)
    weights = tmp_path / "other.safetensors"
    save_file({"w": torch.ones(1)}, str(weights))
    notes = tmp_path / "notes.json"
    notes.write_text('{"a": 1}')
    assert model_kind(good_checkpoint) == TRAINING_CHECKPOINT
    assert model_kind(pickled) == TRAINING_CHECKPOINT
    assert model_kind(exported(good_checkpoint, tmp_path / "e.safetensors")) == EXPORT
    assert model_kind(a_bank(tmp_path / "m.safetensors")) == BANK
    assert model_kind(weights) == SAFETENSORS
    assert model_kind(notes) is None and model_kind(tmp_path / "missing") is None


def test_an_output_refuses_devices_pipes_folders_inputs_and_model_files(good_checkpoint, tmp_path) -> None:
    fifo, link = fifo_and_link(tmp_path, "out")
    for path in (fifo, link):  # the link is followed: what it points to is judged
        with pytest.raises(OutputError, match="is not a regular file"):
            output(path, "the scores")
        assert fifo.is_fifo() and link.is_symlink()
    with pytest.raises(OutputError, match="is a folder"):
        output(tmp_path, "the scores")
    results = tmp_path / "results.json"
    results.write_text("[]")
    hard = tmp_path / "hard.json"
    os.link(results, hard)
    soft = tmp_path / "soft.json"
    soft.symlink_to(results)
    for same in (results, hard, soft):  # the same file under another name
        with pytest.raises(OutputError, match="is the results"):
            output(same, "the scores", inputs={results: "the results"})
    with pytest.raises(OutputError, match=f"{good_checkpoint}: is a training checkpoint; refusing"):
        output(good_checkpoint, "the scores")
    bank = a_bank(tmp_path / "m.safetensors")
    with pytest.raises(OutputError, match="is not a weights-only export but a caption bank"):
        output(bank, "the export", kind=EXPORT)
    assert output(bank, "the caption bank", kind=BANK).target == bank  # a bank replaces one
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.raises(OutputError, match=f"cannot create its folder {blocked}"):
        output(blocked / "x.json", "the scores")
    assert output(tmp_path / "new" / "deeper" / "x.json", "the scores")  # a missing folder is made later
    assert not (tmp_path / "new").exists()  # ... not by the check


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path) -> None:
    target = tmp_path / "scores.json"
    target.write_text("old")
    out = output(target, "the scores")
    unchanged = "scores.json: cannot write the scores there .*it is unchanged"
    with pytest.raises(OSError, match=unchanged), out.replacing() as temp:
        temp.write_bytes(b"{")
        raise OSError(errno.ENOSPC, "No space left on device")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["scores.json"]
    target.chmod(0o640)
    out.write_text("new")
    assert target.read_text() == "new" and target.stat().st_mode & 0o777 == 0o640  # its mode is kept


def test_a_link_is_written_through_and_kept(tmp_path) -> None:
    real = tmp_path / "real" / "scores.json"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "scores.json"
    link.symlink_to(real)
    output(link, "the scores").write_text("new")
    assert link.is_symlink() and real.read_text() == "new"
    assert [p.name for p in real.parent.iterdir()] == ["scores.json"]


# ------------------------------------------------------------------------------------- the commands


def test_bank_never_replaces_its_checkpoint_another_model_or_a_device(
    good_checkpoint, tmp_path, monkeypatch, capsys
) -> None:
    import captioning.inference.evaluation as evaluation

    def no_build(*args, **kwargs):
        raise AssertionError("the bank was built before its output was checked")

    monkeypatch.setattr(evaluation, "build_caption_bank", no_build)
    other = tmp_path / "other.ckpt"
    other.write_bytes(good_checkpoint.read_bytes())
    before = good_checkpoint.read_bytes()
    fifo, link = fifo_and_link(tmp_path, "bank")
    blocked = tmp_path / "file"
    blocked.write_text("")
    cases = [
        (good_checkpoint, "is a checkpoint the bank is built with"),
        (other, "is not a caption bank but a training checkpoint"),
        (fifo, "is not a regular file"),
        (link, "is not a regular file"),
        (blocked / "m.safetensors", f"cannot create its folder {blocked}"),
    ]
    for out, fragment in cases:
        argv = ["bank", "--checkpoint", str(good_checkpoint), "--out", str(out)]
        assert captioning_main([*argv, "data.train.num_images=4", "feature_cache=false"]) == 2
        assert_one_line(capsys.readouterr().err, f"--out {out}", fragment)
    assert good_checkpoint.read_bytes() == before and other.read_bytes() == before
    assert fifo.is_fifo() and link.is_symlink()


def test_bank_makes_a_missing_folder_and_replaces_an_earlier_memory(good_checkpoint, tmp_path) -> None:
    from captioning.inference.caption_bank import CaptionBank

    out = tmp_path / "new" / "bank.safetensors"
    argv = ["bank", "--checkpoint", str(good_checkpoint), "--out", str(out), "feature_cache=false"]
    assert captioning_main([*argv, "data.train.num_images=4"]) == 0 and len(CaptionBank.load(out)) == 4
    assert captioning_main([*argv, "data.train.num_images=3"]) == 0 and len(CaptionBank.load(out)) == 3
    assert [p.name for p in out.parent.iterdir()] == ["bank.safetensors"]


def test_tune_never_writes_its_json_over_the_checkpoint_it_tunes(good_checkpoint, tmp_path, capsys) -> None:
    ckpt = tmp_path / "m.ckpt"
    ckpt.write_bytes(good_checkpoint.read_bytes())
    link = tmp_path / "link.json"
    link.symlink_to(ckpt)
    fifo, _ = fifo_and_link(tmp_path, "tune")
    for out, fragment in ((ckpt, "a checkpoint being tuned"), (link, "a checkpoint being tuned"),
                          (good_checkpoint, "is a training checkpoint"), (fifo, "not a regular file")):  # fmt: skip
        for write in ([], ["--write"]):
            argv = ["tune", "--checkpoint", str(ckpt), *GRID, "--out", str(out), *write, *VAL]
            assert captioning_main(argv) == 2
            assert_one_line(capsys.readouterr().err, f"--out {out}", fragment)
    assert ckpt.read_bytes() == good_checkpoint.read_bytes() and fifo.is_fifo()


def test_tune_write_through_a_link_rewrites_its_target_and_keeps_the_link(good_checkpoint, tmp_path) -> None:
    from captioning.checkpoints.load import load_checkpoint

    real = tmp_path / "runs" / "epoch=3.ckpt"
    real.parent.mkdir()
    real.write_bytes(good_checkpoint.read_bytes())
    link = tmp_path / "last.ckpt"
    link.symlink_to(real)
    out = tmp_path / "tuning.json"
    grid = ["--num-beams", "2", "--length-penalty", "0", "--no-repeat-ngram-size", "0"]
    argv = ["tune", "--checkpoint", str(link), *grid, "--out", str(out), "--write", *VAL]
    assert captioning_main(argv) == 0
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert (
        load_checkpoint(real).decoding["num_beams"]
        == json.loads(out.read_text())["best"]["options"]["num_beams"]
    )
    assert real.read_bytes() != good_checkpoint.read_bytes()


def test_plot_never_replaces_its_metrics_or_a_pipe_and_a_failed_draw_keeps_the_old_png(
    tmp_path, monkeypatch, capsys
) -> None:
    from matplotlib.figure import Figure

    csv_file = tmp_path / "metrics.csv"
    csv_file.write_text("step,train/xent,val/xent\n1,2.0,\n2,1.5,1.7\n")
    before = csv_file.read_bytes()
    fifo, link = fifo_and_link(tmp_path, "plot.png")
    for out, fragment in ((csv_file, "is the metrics.csv being plotted"), (fifo, "is not a regular file"),
                          (link, "is not a regular file")):  # fmt: skip
        assert captioning_main(["plot", str(csv_file), "--out", str(out)]) == 2
        assert_one_line(capsys.readouterr().err, f"--out {out}", fragment)
    assert csv_file.read_bytes() == before and fifo.is_fifo() and link.is_symlink()
    assert captioning_main(["plot", str(csv_file), "--out", str(tmp_path / "curves")]) == 2  # no format
    assert_one_line(capsys.readouterr().err, "the suffix (none) names no image format; expected one of")
    assert captioning_main(["plot", str(csv_file)]) == 0
    png = tmp_path / "curves.png"
    good = png.read_bytes()

    def full_disk(self, fname, *args, **kwargs):
        Path(fname).write_bytes(b"\x89PNG")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full_disk)
    assert captioning_main(["plot", str(csv_file)]) == 2
    assert_one_line(capsys.readouterr().err, "No space left on device")
    assert png.read_bytes() == good and not list(tmp_path.glob(".*partial*"))


def test_score_never_replaces_a_checkpoint_or_a_pipe(good_checkpoint, references, tmp_path, capsys) -> None:
    results = tmp_path / "results.json"
    results.write_text('[{"image_id": 1, "caption": "a red circle"}]')
    before = good_checkpoint.read_bytes()
    fifo, link = fifo_and_link(tmp_path, "scores.json")
    argv = ["score", str(results), "--references", str(references), "--tokenizer", "simple"]
    for out, fragment in ((good_checkpoint, "is a training checkpoint"), (fifo, "is not a regular file"),
                          (link, "is not a regular file"), (references, "is an input file")):  # fmt: skip
        assert captioning_main([*argv, "--metrics", "Bleu_1", "--out", str(out)]) == 2
        out_text, err = capsys.readouterr()
        assert_one_line(err, f"--out {out}", fragment)
        assert out_text == ""  # refused before scoring
    assert good_checkpoint.read_bytes() == before and fifo.is_fifo() and link.is_symlink()


def test_export_refuses_a_link_to_its_source_and_writes_through_a_link_to_an_export(
    good_checkpoint, tmp_path, capsys
) -> None:
    link = tmp_path / "e.safetensors"
    link.symlink_to(good_checkpoint)
    before = good_checkpoint.read_bytes()
    assert captioning_main(["export", str(good_checkpoint), str(link)]) == 2
    assert_one_line(capsys.readouterr().err, str(link), "is the checkpoint being exported")
    assert good_checkpoint.read_bytes() == before and link.is_symlink()
    real = exported(good_checkpoint, tmp_path / "real.safetensors")
    link.unlink()
    link.symlink_to(real)
    assert captioning_main(["export", str(good_checkpoint), str(link), "--fp16"]) == 0
    assert link.is_symlink() and model_kind(real) == EXPORT
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.safetensors", "real.safetensors"]


def test_the_attention_figure_is_written_whole_and_never_over_a_model(good_checkpoint, tmp_path) -> None:
    import numpy as np
    from PIL import Image

    from captioning.inference.viz import save_attention_figure

    image = Image.fromarray(np.zeros((32, 32, 3), dtype=np.uint8))
    figure = (image, ["a", "dot"], np.full((2, 4), 0.25), (2, 2))
    before = good_checkpoint.read_bytes()
    with pytest.raises(OutputError, match="is a training checkpoint"):
        save_attention_figure(good_checkpoint, *figure)
    assert good_checkpoint.read_bytes() == before
    out = save_attention_figure(tmp_path / "figs" / "a.png", *figure)
    assert Image.open(out).format == "PNG" and [p.name for p in out.parent.iterdir()] == ["a.png"]
