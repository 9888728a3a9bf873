"""The hostile-user corpus, round five: a fourth independent tester's 302 cases (2026-12-01), the weak
and wrong ones, each a fix with its test.

Same conventions as ``test_hostile_corpus.py``: the real entry points, the exit status, one stderr line
naming the culprit, and the good inputs of the same call processed."""

from __future__ import annotations

import errno
import io
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from captioning.cli.main import main as captioning_main
from captioning.data.files import write_text_atomically
from captioning.data.vocab import vocabulary_difference

from hostile import assert_one_line, exported, mutated, run_train


def _set_first(suffix: str, value):
    """A mutation of a checkpoint dict: the first state-dict tensor whose name ends in ``suffix``."""

    def mutate(c: dict) -> None:
        name = next(k for k in c["state_dict"] if k.endswith(suffix))
        c["state_dict"][name] = value(c["state_dict"][name])

    return mutate


BROKEN = {
    "negative-running-var": (_set_first("running_var", lambda t: -torch.ones_like(t)), "has negative values"),
    "meta-tensor": (_set_first("weight", lambda t: torch.empty_like(t, device="meta")), "on the meta device"),
    "sparse-tensor": (
        _set_first("embedding.weight", lambda t: t.to_sparse()),
        "torch.sparse_coo (not dense)",
    ),
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_tensors_that_cannot_be_weights_are_refused_by_caption_and_export(
    kind, good_checkpoint, photo, tmp_path, capsys
) -> None:
    mutate, fragment = BROKEN[kind]
    bad = mutated(good_checkpoint, tmp_path / f"{kind}.ckpt", mutate)
    assert captioning_main(["caption", str(photo), "--checkpoint", str(bad)]) == 2
    assert_one_line(capsys.readouterr().err, str(bad), fragment)
    assert captioning_main(["export", str(bad), str(tmp_path / "out.safetensors")]) == 2
    assert_one_line(capsys.readouterr().err, str(bad), fragment)
    assert not (tmp_path / "out.safetensors").exists()


def test_weights_whose_scores_overflow_caption_nothing(good_checkpoint, photo, tmp_path, capsys) -> None:
    # finite weights (3e38 < float32's max) whose logits overflow to inf: the scores are NaN
    huge = mutated(
        good_checkpoint, tmp_path / "huge.ckpt", _set_first("out.weight", lambda t: t.sign() * 3e38)
    )
    assert captioning_main(["caption", str(photo), "--checkpoint", str(huge), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # no caption, and no bare NaN in a JSON line
    assert str(photo) in err and "scores are not finite (NaN/inf)" in err
    from captioning import Captioner

    with pytest.raises(ValueError, match=re.escape("<input 0>: the network's scores are not finite")):
        Captioner.from_checkpoint(huge).caption(torch.rand(3, 16, 16))


def test_a_checkpoint_named_like_an_export_loads_and_an_empty_file_is_named(
    good_checkpoint, photo, tmp_path, capsys
) -> None:
    renamed = tmp_path / "renamed.safetensors"
    renamed.write_bytes(good_checkpoint.read_bytes())
    assert captioning_main(["caption", str(photo), "--checkpoint", str(renamed)]) == 0
    assert capsys.readouterr().out.startswith(f"{photo}\t")
    empty = tmp_path / "empty.ckpt"
    empty.write_bytes(b"")
    assert captioning_main(["caption", str(photo), "--checkpoint", str(empty)]) == 2
    line = assert_one_line(capsys.readouterr().err, str(empty), "the file is empty (0 bytes)")
    assert "weights_only" not in line


def test_an_export_never_replaces_a_training_checkpoint(good_checkpoint, tmp_path, capsys) -> None:
    for name, fragment in (("other.ckpt", "expected a path ending in .safetensors"),
                           ("renamed.safetensors", "is not a weights-only export")):  # fmt: skip
        other = tmp_path / name  # a training checkpoint, under either name
        other.write_bytes(good_checkpoint.read_bytes())
        before = other.read_bytes()
        assert captioning_main(["export", str(good_checkpoint), str(other)]) == 2
        assert_one_line(capsys.readouterr().err, str(other), fragment)
        assert other.read_bytes() == before
    export = exported(good_checkpoint, tmp_path / "e.safetensors")  # an export may be replaced by a new one
    assert captioning_main(["export", str(good_checkpoint), str(export)]) == 0


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("model.val_metrics=CIDEr", "model.val_metrics='CIDEr': expected a non-empty list of"),
        ("run_test=yes", "run_test='yes': expected a boolean"),
        ("run_test=no", "run_test='no': expected a boolean"),
        (
            "trainer.val_check_interval=1000",
            "trainer: `val_check_interval` (1000) must be less than or equal",
        ),
    ],
    ids=["metrics-string", "run-test-yes", "run-test-no", "val-interval-past-the-epoch"],
)
def test_more_training_settings_are_one_line(override, fragment, tmp_path, monkeypatch, capsys) -> None:
    assert run_train([override, "trainer.max_steps=3"], tmp_path / "run", monkeypatch) == 2
    assert_one_line(capsys.readouterr().err, fragment)


def test_a_vocabulary_in_another_order_is_said_so() -> None:
    words = ["<pad>", "<start>", "<end>", "<unk>", "a", "dog", "cat"]
    swapped = [*words[:5], "cat", "dog"]
    assert vocabulary_difference(swapped, words) == (
        "the same 7 words in another order, first apart at id 5 ('cat' there, 'dog' here)"
    )
    assert vocabulary_difference(words[:6], words) == (
        "6 words against this run's 7, first apart at id 6 (nothing there, 'cat' here)"
    )


def test_an_output_file_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "scores.json"
    target.write_text("old")

    def full_disk(f):
        f.write(b"{")
        raise OSError(errno.ENOSPC, "No space left on device")

    from captioning.data.files import write_atomically

    with pytest.raises(OSError, match="No space left"):
        write_atomically(target, full_disk)
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["scores.json"]
    write_text_atomically(target, "new")
    assert target.read_text() == "new"


def test_overlays_are_listed_only_once_written(good_checkpoint, photo, tmp_path, monkeypatch, capsys) -> None:
    args = ["caption", str(photo), "--checkpoint", str(good_checkpoint), "--overlay"]
    assert captioning_main([*args, "/proc/nope/o.png"]) == 2  # checked before any image is decoded
    assert_one_line(
        capsys.readouterr().err, "--overlay /proc/nope/o.png", "cannot create the folder /proc/nope"
    )

    def no_space(self, fp, format=None, **params):  # noqa: A002 - Pillow's name
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Image.Image, "save", no_space)
    out_png = tmp_path / "o.png"
    assert captioning_main([*args, str(out_png)]) == 1
    out, err = capsys.readouterr()
    assert out.startswith(f"{photo}\t") and "(overlay:" not in out  # the caption, not a file never written
    assert "No space left on device" in err and list(tmp_path.iterdir()) == [photo]  # no 0-byte PNG


def test_tune_checks_its_outputs_and_split_before_the_grid(good_checkpoint, tmp_path, capsys) -> None:
    grid = ["--num-beams", "1", "--length-penalty", "0", "--no-repeat-ngram-size", "0"]
    base = ["tune", "--checkpoint", str(good_checkpoint)]
    assert captioning_main([*base, "--out", str(tmp_path), "data.val.num_images=4", *grid]) == 2
    assert_one_line(capsys.readouterr().err, f"--out {tmp_path}: is a folder")
    assert captioning_main([*base, "data.val.num_images=1", *grid]) == 2
    assert_one_line(capsys.readouterr().err, "the val split has 1 image(s); tuning needs at least 2")


def test_storing_tuned_defaults_where_the_file_cannot_be_replaced_leaves_nothing_behind(
    good_checkpoint, tmp_path, monkeypatch
) -> None:
    from captioning.checkpoints import defaults

    export = exported(good_checkpoint, tmp_path / "e.safetensors")
    before = export.read_bytes()

    def refuse(src, dst):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "replace", refuse)  # where the export module replaces the file
    with pytest.raises(OSError, match=re.escape(f"{export}: cannot store the decoding defaults there")):
        defaults.write_decoding_defaults(export, {"num_beams": 2})
    assert export.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["e.safetensors"]


def test_sigterm_stops_training_with_status_143_and_a_checkpoint_to_resume(tmp_path: Path) -> None:
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "captioning.training.train", "debug=tiny", "trainer.max_steps=100000",
           "trainer.enable_progress_bar=false", "callbacks.progress_lines.every_n_steps=1",
           f"hydra.run.dir={run}"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:  # the progress lines: training has started
        if line.startswith("step "):
            break
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "stopped by SIGTERM at step" in err and "resume with ckpt_path=last" in err
    assert (run / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.parametrize(
    ("image", "error", "fragment"),
    [
        (None, TypeError, "cannot caption a NoneType"),
        ({"image": "x.png"}, TypeError, "cannot caption a dict"),
        (np.array([[object()]]), ValueError, "an image array of dtype object cannot be pixels"),
    ],
    ids=["none", "dict", "object-array"],
)
def test_the_api_refuses_what_is_not_an_image(good_checkpoint, image, error, fragment) -> None:
    from captioning import Captioner

    with pytest.raises(error, match=re.escape(fragment)):
        Captioner.from_checkpoint(good_checkpoint).caption(image)


def test_the_api_captions_image_bytes_and_binary_files(good_checkpoint, photo) -> None:
    from captioning import Captioner

    model = Captioner.from_checkpoint(good_checkpoint)
    expected = model.caption(photo)[0].caption
    data = photo.read_bytes()
    assert model.caption(data)[0].caption == expected
    assert model.caption(io.BytesIO(data))[0].caption == expected
    with open(photo, "rb") as f:
        assert model.caption(f)[0].caption == expected
    with pytest.raises(ValueError, match=re.escape("bytes of image data>: not a readable image")):
        model.caption(b"\0not an image")


def test_a_broken_overflowing_checkpoint_json_is_never_printed(
    good_checkpoint, photo, tmp_path, capsys
) -> None:
    """--json lines are valid JSON (no bare NaN): every printed line parses."""
    assert captioning_main(["caption", str(photo), "--checkpoint", str(good_checkpoint), "--json"]) == 0
    for line in capsys.readouterr().out.splitlines():
        json.loads(line, parse_constant=lambda name: pytest.fail(f"bare {name} in --json output"))


# ------------------------------------------------------------------- round six (a fifth tester's new cases)


def test_evaluate_and_tune_never_score_overflowing_weights(good_checkpoint, tmp_path, capsys) -> None:
    huge = mutated(
        good_checkpoint, tmp_path / "huge.ckpt", _set_first("out.weight", lambda t: t.sign() * 3e38)
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
        (
            "init_from=a.ckpt ckpt_path=b.ckpt",
            "init_from='a.ckpt' and ckpt_path='b.ckpt': expected one of them",
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
