"""The hostile-user corpus, rounds six and seven: a fifth and a sixth independent tester's new cases
(2026-12-01), the weak and wrong ones, each a fix with its test.

Same conventions as ``test_hostile_corpus.py``: the real entry points, the exit status, one stderr line
naming the culprit, and the good inputs of the same call processed."""

from __future__ import annotations

import os
import re
import sys

import pytest
import torch
from PIL import Image

from captioning.cli.main import main as captioning_main

from hostile import assert_one_line, exported, mutated, run_train, set_first

# ------------------------------------------------------------------- round six (a fifth tester's new cases)


def test_evaluate_and_tune_never_score_overflowing_weights(good_checkpoint, tmp_path, capsys) -> None:
    huge = mutated(
        good_checkpoint, tmp_path / "huge.ckpt", set_first("out.weight", lambda t: t.sign() * 3e38)
    )
    assert captioning_main(["evaluate", "--checkpoint", str(huge), "--out-dir", str(tmp_path / "ev"),
                            "data.test.num_images=2"]) == 2  # fmt: skip
    assert_one_line(capsys.readouterr().err, "scores are not finite (NaN/inf)")
    assert not (tmp_path / "ev").exists()
    grid = ["--num-beams", "1", "--length-penalty", "0", "--no-repeat-ngram-size", "0", "--write"]
    before = huge.read_bytes()
    assert captioning_main(["tune", "--checkpoint", str(huge), "data.val.num_images=2", *grid]) == 2
    assert_one_line(capsys.readouterr().err, str(huge), "scores are not finite (NaN/inf)")
    assert huge.read_bytes() == before  # nothing "best" was stored


def test_last_ckpt_holds_the_end_of_training_and_resuming_extends_it(tmp_path, monkeypatch, capsys) -> None:
    from captioning.training.train import main as train_main

    run = tmp_path / "run"
    last = run / "checkpoints" / "last.ckpt"
    for argv in (["trainer.max_steps=20"], ["trainer.max_steps=26", "ckpt_path=last"]):
        monkeypatch.setattr(sys, "argv", ["captioning-train", "debug=tiny", *argv, f"hydra.run.dir={run}"])
        train_main()  # a finished run: no SystemExit
    assert torch.load(last, weights_only=True)["global_step"] == 26  # the end, not the last periodic save
    capsys.readouterr()
    assert run_train(["trainer.max_steps=10", "ckpt_path=last"], run, monkeypatch) == 2
    assert_one_line(capsys.readouterr().err, str(last), "at step 26", "trainer.max_steps=10 leaves nothing")


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("trainer.limit_train_batches=0", "trainer.limit_train_batches=0: expected an integer >= 1"),
        (
            "callbacks.model_checkpoint.dirpath=/proc/x",
            "callbacks.model_checkpoint.dirpath='/proc/x': cannot create",
        ),
        (  # init_from is allowed beside ckpt_path (resuming ignores it), the file must exist
            "init_from=a.ckpt ckpt_path=b.ckpt",
            "ckpt_path=b.ckpt: no such checkpoint file",
        ),
    ],
    ids=["no-batches", "checkpoint-folder", "init-and-resume"],
)
def test_training_settings_that_would_train_nothing_or_save_nowhere(
    override, fragment, tmp_path, monkeypatch, capsys
) -> None:
    assert run_train([*override.split(), "trainer.max_steps=3"], tmp_path / "run", monkeypatch) == 2
    assert_one_line(capsys.readouterr().err, fragment)


def test_an_empty_run_folder_and_empty_output_paths_are_refused(
    good_checkpoint, tmp_path, monkeypatch, capsys
):
    from captioning.training.train import cli

    monkeypatch.setattr(sys, "argv", ["captioning-train", "debug=tiny", "hydra.run.dir="])
    with pytest.raises(SystemExit) as info:
        cli()
    assert info.value.code == 2
    assert_one_line(capsys.readouterr().err, "hydra.run.dir='': expected a folder path")
    for argv in (
        ["evaluate", "--checkpoint", str(good_checkpoint), "--out-dir", ""],
        ["score", str(tmp_path / "r.json"), "--references", str(tmp_path / "f.json"), "--out", ""],
        ["plot", str(tmp_path), "--out", ""],
    ):
        with pytest.raises(SystemExit) as info:
            captioning_main(argv)
        assert info.value.code == 2 and "an empty string is not a file path" in capsys.readouterr().err


def test_more_broken_checkpoints_are_one_line(good_checkpoint, photo, tmp_path, capsys) -> None:
    nested = "a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 200)) + "  " * 200 + "x: 1\n"
    cases = {
        "deep.ckpt": (
            lambda c: c["captioning"].__setitem__("net_config", nested),
            "nested more than 32 levels",
        ),
        "stray.ckpt": (
            lambda c: c["state_dict"].__setitem__("extra_int", 5),
            "'extra_int' is not part of the network",
        ),
    }
    for name, (mutate, fragment) in cases.items():
        bad = mutated(good_checkpoint, tmp_path / name, mutate)
        assert captioning_main(["caption", str(photo), "--checkpoint", str(bad)]) == 2
        assert_one_line(capsys.readouterr().err, str(bad), fragment)
    zeros = tmp_path / "zeros.ckpt"
    zeros.write_bytes(b"\0" * 64)
    assert captioning_main(["caption", str(photo), "--checkpoint", str(zeros)]) == 2
    line = assert_one_line(capsys.readouterr().err, str(zeros), "not a readable checkpoint")
    assert "trusted source" not in line and "weights_only" not in line
    blocked = tmp_path / "file"
    blocked.write_text("a file")
    assert captioning_main(["export", str(good_checkpoint), str(blocked / "x.safetensors")]) == 2
    assert_one_line(capsys.readouterr().err, f"cannot create its folder {blocked}")


def test_evaluate_names_a_negative_scene_seed(good_checkpoint, tmp_path, capsys) -> None:
    argv = ["evaluate", "--checkpoint", str(good_checkpoint), "--out-dir", str(tmp_path / "ev")]
    assert captioning_main([*argv, "data.test.num_images=2", "data.test.seed=-1"]) == 2
    assert_one_line(capsys.readouterr().err, "data.test: seed=-1: expected an integer >= 0")


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


def test_the_demo_checks_its_address_before_loading_the_model(good_checkpoint, capsys) -> None:
    import socket

    from captioning.cli.demo import check_address

    with pytest.raises(SystemExit):
        captioning_main(["demo", "--checkpoint", str(good_checkpoint), "--port", "70000"])
    assert "70000 is not a port number (1-65535)" in capsys.readouterr().err
    assert "not an address of this machine" in check_address("not a host", 7860)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert "Address already in use" in check_address("127.0.0.1", port)


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda m, p: m.caption(p, seed=-1), "seed=-1: expected an integer in [0, 2**63)"),
        (
            lambda m, p: m.caption(p, do_sample=True, temperature=1e-45),
            "temperature=1e-45: expected a number in [1e-4",
        ),
        (lambda m, p: m.caption(b""), "an empty string or bytes is neither an image path nor image data"),
        (lambda m, p: m.caption(""), "an empty string or bytes is neither an image path nor image data"),
        (lambda m, p: m.caption(123), "cannot caption a int"),
        (lambda m, p: m.caption(p)[0].overlay(p, p.with_suffix(".txt")), ".txt is not an image format"),
    ],
    ids=["seed", "temperature", "empty-bytes", "empty-string", "int", "overlay-suffix"],
)
def test_the_api_names_more_bad_arguments(good_checkpoint, photo, call, fragment) -> None:
    from captioning import Captioner

    with pytest.raises((ValueError, TypeError), match=re.escape(fragment)):
        call(Captioner.from_checkpoint(good_checkpoint), photo)


def test_the_api_reads_memoryviews_and_names_a_truncated_pil_image(good_checkpoint, photo, tmp_path) -> None:
    from captioning import Captioner

    model = Captioner.from_checkpoint(good_checkpoint)
    assert model.caption(memoryview(photo.read_bytes()))[0].caption == model.caption(photo)[0].caption
    cut = tmp_path / "cut.png"
    cut.write_bytes(photo.read_bytes()[:200])
    with pytest.raises(ValueError, match=re.escape(f"{cut}: the PIL image cannot be decoded")):
        model.caption(Image.open(cut))


# ------------------------------------------------------------------ round seven (a sixth tester's new cases)


def test_export_never_replaces_a_device_or_pipe_and_names_a_broken_export(good_checkpoint, tmp_path, capsys):

    fifo = tmp_path / "pipe.safetensors"
    os.mkfifo(fifo)
    assert captioning_main(["export", str(good_checkpoint), str(fifo)]) == 2
    assert_one_line(capsys.readouterr().err, str(fifo), "is not a regular file")
    assert fifo.is_fifo()
    export = exported(good_checkpoint, tmp_path / "e.safetensors")
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(export.read_bytes()[:-100])
    assert captioning_main(["export", str(cut), str(tmp_path / "again.safetensors")]) == 2
    line = assert_one_line(capsys.readouterr().err, str(cut))
    assert "already a weights-only export" not in line


def test_missing_weights_are_counted_not_listed(good_checkpoint, photo, tmp_path, capsys) -> None:
    empty = mutated(good_checkpoint, tmp_path / "empty_sd.ckpt", lambda c: c.__setitem__("state_dict", {}))
    assert captioning_main(["caption", str(photo), "--checkpoint", str(empty)]) == 2
    line = assert_one_line(capsys.readouterr().err, str(empty), "the weights do not fit", "missing (e.g.")
    assert len(line) < 400


def test_resume_and_start_settings_of_round_seven(tmp_path, monkeypatch, capsys) -> None:
    from captioning.training.resume import ResumeError, check_resume_matches

    from corpus import build_module, checkpoint_dict

    run = tmp_path / "run"
    assert run_train(["init_from=", "trainer.max_steps=3"], run, monkeypatch) == 2
    assert_one_line(capsys.readouterr().err, "init_from='': expected a checkpoint path, or null")
    assert run_train(["model.decoder.embed_dim=[1,2]", "trainer.max_steps=3"], run, monkeypatch) == 2
    assert_one_line(capsys.readouterr().err, "model.decoder.embed_dim=[1, 2]: expected an integer")
    checkpoint = checkpoint_dict(build_module(["a"]))
    checkpoint["global_step"] = -5
    bad = tmp_path / "bad.ckpt"
    torch.save(checkpoint, bad)
    with pytest.raises(ResumeError, match=re.escape("its global_step is -5; expected the integer step >= 0")):
        check_resume_matches(bad, {"itos": []}, "")


def test_evaluate_refuses_an_out_dir_that_is_a_file_before_decoding(
    good_checkpoint, tmp_path, capsys
) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    argv = [
        "evaluate",
        "--checkpoint",
        str(good_checkpoint),
        "--out-dir",
        str(target),
        "data.test.num_images=2",
    ]
    assert captioning_main(argv) == 2
    assert_one_line(capsys.readouterr().err, f"--out-dir {target}: is a file")


def test_the_api_names_bad_paths_and_never_overlays_onto_its_image(good_checkpoint, photo) -> None:
    from captioning import Captioner

    for bad in (123, None, ""):
        with pytest.raises(TypeError, match=re.escape(f"from_checkpoint: path={bad!r}")):
            Captioner.from_checkpoint(bad)
    model = Captioner.from_checkpoint(good_checkpoint)
    result = model.caption(photo)[0]
    before = photo.read_bytes()
    with pytest.raises(ValueError, match=re.escape(f"{photo}: is the captioned image")):
        result.overlay(photo, photo)
    assert photo.read_bytes() == before
    with pytest.raises(TypeError, match=re.escape("overlay: path=123")):
        result.overlay(photo, 123)
    with pytest.raises(ValueError, match=re.escape("an image of 0x0 pixels has nothing to caption")):
        model.caption(Image.new("RGBA", (0, 0)))
