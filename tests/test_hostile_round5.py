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

from hostile import assert_one_line, exported, mutated, run_train, set_first

BROKEN = {
    "negative-running-var": (set_first("running_var", lambda t: -torch.ones_like(t)), "has negative values"),
    "meta-tensor": (set_first("weight", lambda t: torch.empty_like(t, device="meta")), "on the meta device"),
    "sparse-tensor": (
        set_first("embedding.weight", lambda t: t.to_sparse()),
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
        good_checkpoint, tmp_path / "huge.ckpt", set_first("out.weight", lambda t: t.sign() * 3e38)
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
