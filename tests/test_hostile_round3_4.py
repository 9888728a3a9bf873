"""The hostile-user corpus, rounds three and four: two more independent testers' cases (2026-12-01).

Same conventions as ``test_hostile_corpus.py``."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from captioning.checkpoints.format import CHECKPOINT_KEY
from captioning.cli.main import main as captioning_main

from hostile import (
    assert_one_line,
    error_lines,
    exported,
    mutated,
    poison_weights,
    run_train,
)

# ------------------------------------------------------------------- round three (an independent corpus)


def test_an_export_with_integer_weights_or_a_header_nested_too_deep_is_refused(
    good_checkpoint: Path, photo: Path, tmp_path: Path, capsys
) -> None:
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    export = exported(good_checkpoint, tmp_path / "good.safetensors")
    with safe_open(str(export), framework="pt") as f:
        metadata = f.metadata()
    tensors = load_file(str(export))
    name = next(k for k, v in tensors.items() if v.is_floating_point())
    save_file({**tensors, name: tensors[name].to(torch.int32)}, str(tmp_path / "ints.safetensors"), metadata)
    deep = {**metadata, CHECKPOINT_KEY: "[" * 50_000 + "]" * 50_000}
    save_file(tensors, str(tmp_path / "deep.safetensors"), deep)
    for bad, culprit in (("ints", f"tensor {name} is int32"), ("deep", "nested too deeply")):
        path = tmp_path / f"{bad}.safetensors"
        assert captioning_main(["caption", str(photo), "--checkpoint", str(path)]) == 2
        out, err = capsys.readouterr()
        assert_one_line(err, str(path), culprit)
        assert out == ""


def test_a_pipe_or_device_as_checkpoint_is_named_as_such(photo: Path, tmp_path: Path, capsys) -> None:
    import os

    fifo = tmp_path / "fifo.ckpt"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        assert captioning_main(["caption", str(photo), "--checkpoint", str(path)]) == 2
        assert_one_line(capsys.readouterr().err, str(path), "is not a regular file")


def test_an_empty_image_argument_is_refused_not_read_as_the_current_folder(
    good_checkpoint: Path, photo: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.chdir(photo.parent)  # a folder with an image in it: '' must not caption it
    assert captioning_main(["caption", "", "--checkpoint", str(good_checkpoint)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "image argument 1 is an empty string" in err
    assert captioning_main(["caption", str(photo), "", "--checkpoint", str(good_checkpoint)]) == 1
    out, err = capsys.readouterr()
    assert out.startswith(f"{photo}\t") and "image argument 2 is an empty string" in err


def test_an_unwritable_export_target_is_named(good_checkpoint: Path, capsys) -> None:
    target = Path("/proc/x.safetensors")  # the folder exists; nothing can be written in it
    assert captioning_main(["export", str(good_checkpoint), str(target)]) == 2
    assert_one_line(capsys.readouterr().err, str(target), "cannot write the export there")


def test_a_closed_stdout_and_ctrl_c_end_the_command_quietly(good_checkpoint: Path, photo: Path) -> None:
    import signal
    import subprocess

    # `| head -c 1`: the reader leaves after one byte; no BrokenPipeError traceback, the status of SIGPIPE.
    cmd = [sys.executable, "-m", "captioning.cli.main", "caption", *[str(photo)] * 4,
           "--checkpoint", str(good_checkpoint), "--json"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(1)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) in (0, 141) and "Traceback" not in err, err
    # Ctrl-C while the command runs (after its first caption, so inside the command, not in Python's
    # start-up): one line, status 130, or 0 when the remaining captions finished first.
    many = [*cmd[:4], *[str(photo)] * 200, *cmd[8:]]
    proc = subprocess.Popen(many, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    proc.stdout.read()
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=120)
    assert code in (0, 130) and "Traceback" not in err, (code, err)
    if code == 130:
        assert error_lines(err)[-1] == "captioning caption: interrupted"


def test_nan_pixels_of_a_float_image_are_said(tmp_path: Path, caplog) -> None:
    from captioning.data.images import load_rgb

    values = np.random.default_rng(0).random((20, 30)).astype(np.float32)
    values[:5] = np.nan
    path = tmp_path / "partnan.tif"
    Image.fromarray(values, mode="F").save(path)
    with caplog.at_level("WARNING"):
        img = load_rgb(path)
    assert img.size == (30, 20) and np.asarray(img)[:5].max() == 0
    assert any(
        str(path) in r.getMessage() and "150 of 600 pixels are NaN" in r.getMessage() for r in caplog.records
    )


def test_a_folder_given_as_an_annotation_file_is_named_a_folder(tmp_path: Path) -> None:
    from captioning.data.readers import DatasetError, _existing

    with pytest.raises(DatasetError, match="is a folder; expected"):
        _existing(tmp_path, "an annotation file")


def test_resuming_from_a_checkpoint_with_non_finite_weights_names_it(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    from captioning.training.train import train

    from conftest import TINY, compose_train

    run = tmp_path / "run"
    train(compose_train([*TINY, "trainer.max_steps=2"], run))
    last = run / "checkpoints" / "last.ckpt"
    mutated(last, last, poison_weights)
    capsys.readouterr()
    assert run_train(["trainer.max_steps=4", "ckpt_path=last"], run, monkeypatch) == 2
    assert_one_line(capsys.readouterr().err, str(last), "non-finite weights")


def test_a_full_disk_while_saving_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    import captioning.checkpoints.save as save

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(save.torch, "save", full)
    assert run_train(["trainer.max_steps=2"], tmp_path / "run", monkeypatch) == 2
    assert_one_line(capsys.readouterr().err, "could not write the checkpoint", "No space left on device")


def test_an_unreadable_init_from_is_refused_before_the_data_are_read(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    from captioning.data.sources import SyntheticSource

    bad = tmp_path / "prose.ckpt"
    bad.write_text("This is not a checkpoint\n")

    def refuse(*args, **kwargs):
        raise AssertionError("the data were read before init_from was checked")

    monkeypatch.setattr(SyntheticSource, "__init__", refuse)
    assert run_train([f"init_from={bad}"], tmp_path / "run", monkeypatch) == 2
    assert_one_line(capsys.readouterr().err, str(bad), "not a readable checkpoint")


# ------------------------------------------------------------------- round four (a third tester's new cases)


@pytest.mark.parametrize(
    ("image", "fragment"),
    [
        (Image.new("RGB", (0, 0)), "0x0 pixels has nothing to caption"),
        (np.zeros((0, 0, 3), np.uint8), "0x0 pixels has nothing to caption"),
        (torch.arange(3 * 8 * 8).view(3, 8, 8) * 4, "must hold values in [0, 255], got [0, 764]"),
        (-torch.ones(3, 8, 8, dtype=torch.int8), "must hold values in [0, 255], got [-1, -1]"),
        (np.full((8, 8, 3), 300, np.int64), "must hold values in [0, 255]"),
        (torch.ones(3, 8, 8, dtype=torch.bool), "torch.bool cannot be pixels"),
        (np.full((8, 8, 3), 300, np.uint16), "must hold values in [0, 255], got [300, 300]"),
    ],
    ids=["pil-0x0", "array-0x0", "int64-0-1020", "int8-negative", "array-int64-300", "bool", "uint16-300"],
)
def test_the_api_refuses_empty_images_and_integers_a_cast_would_wrap(
    good_checkpoint, image, fragment
) -> None:
    from captioning import Captioner

    model = Captioner.from_checkpoint(good_checkpoint)
    with pytest.raises(ValueError, match=re.escape(fragment)):
        model.caption(image)


def test_a_float_array_in_0_1_is_captioned_like_the_same_tensor(good_checkpoint) -> None:
    from captioning import Captioner

    model = Captioner.from_checkpoint(good_checkpoint)
    values = np.random.default_rng(0).random((16, 16, 3))
    from_array = model.caption(values)[0].caption
    assert from_array == model.caption(torch.from_numpy(values).permute(2, 0, 1).float())[0].caption


def test_a_checkpoint_without_its_image_size_or_with_a_list_state_dict_is_refused(
    good_checkpoint: Path, photo: Path, tmp_path: Path, capsys
) -> None:
    no_size = mutated(
        good_checkpoint, tmp_path / "nosize.ckpt", lambda c: c[CHECKPOINT_KEY].pop("image_size")
    )
    as_list = mutated(good_checkpoint, tmp_path / "list.ckpt", lambda c: c.__setitem__("state_dict", [1, 2]))
    for bad, culprit in ((no_size, "image_size = None"), (as_list, "'state_dict' is a list")):
        assert captioning_main(["caption", str(photo), "--checkpoint", str(bad)]) == 2
        assert_one_line(capsys.readouterr().err, str(bad), culprit)


def test_an_empty_checkpoint_argument_and_an_overlong_image_name_are_named(
    good_checkpoint: Path, photo: Path, capsys
) -> None:
    with pytest.raises(SystemExit) as info:
        captioning_main(["caption", str(photo), "--checkpoint", ""])
    assert info.value.code == 2 and "an empty string is not a file path" in capsys.readouterr().err
    long = photo.parent / ("x" * 300 + ".png")
    assert captioning_main(["caption", str(photo), str(long), "--checkpoint", str(good_checkpoint)]) == 1
    out, err = capsys.readouterr()
    assert out.startswith(f"{photo}\t") and "cannot be opened: File name too long" in err


def test_corrupt_exif_is_one_warning_naming_the_image_and_it_is_captioned(
    good_checkpoint, photo, capsys, caplog
) -> None:
    bad = photo.parent / "bad_exif.jpg"  # an EXIF IFD that claims 5 entries and holds one byte
    Image.open(photo).save(bad, "JPEG", exif=b"Exif\x00\x00MM\x00\x2a\x00\x00\x00\x08\x00\x05\x01")
    with caplog.at_level("WARNING"):
        assert captioning_main(["caption", str(photo), str(bad), "--checkpoint", str(good_checkpoint)]) == 0
    out, err = capsys.readouterr()
    assert [line.split("\t")[0] for line in out.splitlines()] == [str(photo), str(bad)]
    (record,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert str(bad) in record.getMessage() and "Corrupt EXIF data" in record.getMessage()
    assert "UserWarning" not in err and "warnings.warn" not in err  # Pillow's own two lines are gone


def test_a_decoding_entry_that_is_not_a_mapping_is_named_with_what_was_expected(
    good_checkpoint, photo, tmp_path, capsys
) -> None:
    bad = mutated(
        good_checkpoint, tmp_path / "k03.ckpt", lambda c: c[CHECKPOINT_KEY].__setitem__("decoding", [3, 20])
    )
    assert captioning_main(["caption", str(photo), "--checkpoint", str(bad)]) == 2
    assert_one_line(
        capsys.readouterr().err, str(bad), "decoding: expected a mapping of decoding options", "got a list"
    )


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("data.train.split=bogus", "data.train: split must be one of ['test', 'train', 'val'], got 'bogus'"),
        ("model.decoder.attention=null", "model.decoder.attention=null: expected AttentionLayer | Callable"),
    ],
    ids=["split", "attention-null"],
)
def test_a_data_source_refusing_its_split_and_a_null_layer_are_one_line(
    override, fragment, tmp_path, monkeypatch, capsys
) -> None:
    assert run_train([override, "trainer.max_steps=3"], tmp_path / "run", monkeypatch) == 2
    assert_one_line(capsys.readouterr().err, fragment)
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_references_whose_captions_are_all_empty_are_refused_naming_the_image(tmp_path, capsys) -> None:
    refs = {
        "images": [{"id": 1}, {"id": 1001}],
        "annotations": [
            {"id": 1, "image_id": 1, "caption": "a red circle"},
            {"id": 2, "image_id": 1001, "caption": ""},
            {"id": 3, "image_id": 1001, "caption": "  "},
        ],
    }
    (tmp_path / "refs.json").write_text(json.dumps(refs))
    results = [{"image_id": 1, "caption": "a red circle"}, {"image_id": 1001, "caption": "a blue square"}]
    (tmp_path / "res.json").write_text(json.dumps(results))
    argv = [
        "score",
        str(tmp_path / "res.json"),
        "--references",
        str(tmp_path / "refs.json"),
        "--tokenizer",
        "simple",
    ]
    assert captioning_main(argv) == 2
    assert_one_line(capsys.readouterr().err, "refs.json", "only empty reference captions", "[1001]")


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("feature_cache=maybe", "feature_cache='maybe': expected a boolean"),
        ("+bogus=1", "bogus: unknown top-level key(s)"),
        ("data.test.seed=abc", "data.test.seed='abc': expected an integer"),
        ("batch_size=0", "batch_size=0: expected an integer >= 1"),
    ],
    ids=["bool", "unknown-key", "data-type", "batch-size"],
)
def test_evaluate_checks_its_config_like_training_does(
    override, fragment, good_checkpoint, tmp_path, capsys
) -> None:
    argv = ["evaluate", "--checkpoint", str(good_checkpoint), "--out-dir", str(tmp_path / "ev")]
    assert captioning_main([*argv, "data.test.num_images=2", override]) == 2
    assert_one_line(capsys.readouterr().err, fragment)
    assert not (tmp_path / "ev").exists()


def test_the_api_takes_a_bytes_path_and_refuses_an_empty_overlay_image(good_checkpoint, photo) -> None:
    from captioning import Captioner

    model = Captioner.from_checkpoint(good_checkpoint)
    (from_bytes,) = model.caption(bytes(photo))
    assert from_bytes.image == str(photo)
    assert from_bytes.caption == model.caption(photo)[0].caption
    with pytest.raises(
        ValueError, match=re.escape("an image of 0x0 pixels has nothing to caption or draw on")
    ):
        from_bytes.overlay(Image.new("RGB", (0, 0)))
