"""The hostile-user corpus, round two: an independent tester's cases (2026-12-01), each a fix with its test.

Same conventions as ``test_hostile_corpus.py``: the real entry points, the exit status, one stderr line
naming the culprit, and the good inputs of the same call processed."""

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
    mutated,
    run_train,
    set_config,
)

# ------------------------------------------------------------- round 2: an independent tester's cases


def test_a_yaml_alias_bomb_in_a_checkpoint_is_refused_before_parsing(
    good_checkpoint, photo, tmp_path, capsys
):
    bomb = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{n}: &{n} [{','.join(['*' + p] * 9)}]\n" for p, n in zip("abcdef", "bcdefg")
    )
    bad = mutated(good_checkpoint, tmp_path / "bomb.ckpt", set_config(bomb + "encoder: {}\n"))
    assert captioning_main(["caption", str(photo), "--checkpoint", str(bad)]) == 2  # in milliseconds
    assert_one_line(capsys.readouterr().err, str(bad), "anchors/aliases")


def test_vocabulary_words_with_whitespace_are_refused(good_checkpoint, photo, tmp_path, capsys):
    def spaced(c: dict) -> None:
        c[CHECKPOINT_KEY]["vocab"]["itos"][5] = "two\nlines"

    bad = mutated(good_checkpoint, tmp_path / "nl.ckpt", spaced)
    assert captioning_main(["caption", str(photo), "--checkpoint", str(bad)]) == 2
    assert_one_line(capsys.readouterr().err, str(bad), "vocabulary word 5")


def test_an_overlay_never_overwrites_an_input_and_its_format_is_checked_first(
    good_checkpoint, photo, tmp_path, capsys
):
    before = photo.read_bytes()
    argv = ["caption", str(photo), "--checkpoint", str(good_checkpoint)]
    assert captioning_main([*argv, "--overlay", str(photo)]) == 2
    assert_one_line(capsys.readouterr().err, "would overwrite the input image")
    assert photo.read_bytes() == before
    argv2 = ["caption", str(photo), str(photo), "--checkpoint", str(good_checkpoint)]
    assert captioning_main([*argv2, "--overlay", str(tmp_path / "att.txt")]) == 2
    out, err = capsys.readouterr()
    assert_one_line(err, "att.txt", "not an image format")
    assert out == ""


def test_tabs_and_newlines_in_file_names_keep_one_record_per_line(good_checkpoint, photo, tmp_path, capsys):
    odd = [tmp_path / "t\tab.png", tmp_path / "n\nl.png"]
    for path in odd:
        path.write_bytes(photo.read_bytes())
    assert captioning_main(["caption", *map(str, odd), "--checkpoint", str(good_checkpoint)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in lines] == [
        str(tmp_path / "t\\tab.png"),
        str(tmp_path / "n\\nl.png"),
    ]


@pytest.mark.parametrize("mode", ["I;16", "I"])
def test_8_bit_data_in_a_16_bit_file_is_not_black(mode: str, tmp_path: Path) -> None:
    from captioning.data.images import load_rgb

    gray = np.arange(0, 240, dtype=np.uint16).reshape(12, 20)
    path = tmp_path / "g16.png"
    Image.fromarray(gray).convert(mode).save(path) if mode == "I" else Image.fromarray(gray).save(path)
    pixels = np.asarray(load_rgb(path))[..., 0]
    assert pixels.max() == 239 and pixels.min() == 0  # the values themselves, not their (zero) top byte


def test_an_image_without_a_finite_pixel_is_refused(good_checkpoint, photo, tmp_path, capsys):
    nan = tmp_path / "nan.tif"
    Image.fromarray(np.full((16, 16), np.nan, np.float32)).save(nan)
    assert captioning_main(["caption", str(nan), str(photo), "--checkpoint", str(good_checkpoint)]) == 1
    out, err = capsys.readouterr()
    assert out.startswith(f"{photo}\t")
    assert str(nan) in err and "no finite pixel" in err


def test_an_export_never_replaces_a_good_file_with_a_bad_one_nor_overwrites_its_source(
    good_checkpoint, tmp_path, capsys
):
    out = tmp_path / "e.safetensors"
    assert captioning_main(["export", str(good_checkpoint), str(out)]) == 0
    good_export = out.read_bytes()
    huge = mutated(good_checkpoint, tmp_path / "huge.ckpt", lambda c: next(
        v for k, v in c["state_dict"].items() if k.endswith("weight")).fill_(1e6))  # fmt: skip
    capsys.readouterr()
    assert captioning_main(["export", str(huge), str(out), "--fp16"]) == 2
    assert_one_line(capsys.readouterr().err, str(out), "float16")
    assert out.read_bytes() == good_export and not list(tmp_path.glob("*.partial"))
    source = good_checkpoint.read_bytes()
    assert captioning_main(["export", str(good_checkpoint), str(good_checkpoint)]) == 2
    assert_one_line(capsys.readouterr().err, "is the checkpoint being exported")
    assert good_checkpoint.read_bytes() == source
    assert captioning_main(["export", str(out), str(tmp_path / "again.safetensors")]) == 2
    assert_one_line(capsys.readouterr().err, "already a weights-only export")


def test_evaluate_prints_its_scores_before_an_unwritable_out_dir_fails(good_checkpoint, tmp_path, capsys):
    blocked = tmp_path / "file"
    blocked.write_text("")
    argv = ["evaluate", "--checkpoint", str(good_checkpoint), "--out-dir", str(blocked / "x"), "data=synthetic",
            "data.test.num_images=4", "tokenizer=simple", "decoding.num_beams=1"]  # fmt: skip
    assert captioning_main(argv) == 1
    out, err = capsys.readouterr()
    assert "CIDEr" in out
    assert_one_line(err, str(blocked / "x"), "cannot write the results")


def test_score_refuses_an_out_over_its_input_and_a_run_that_computes_nothing(references, tmp_path, capsys):
    results = tmp_path / "results.json"
    results.write_text('[{"image_id": 1, "caption": "a red circle"}, {"image_id": 2, "caption": "a square"}]')
    before = results.read_bytes()
    argv = ["score", str(results), "--references", str(references), "--tokenizer", "simple"]
    assert captioning_main([*argv, "--out", str(results)]) == 2
    assert_one_line(capsys.readouterr().err, "is an input file")
    assert results.read_bytes() == before
    assert captioning_main([*argv, "--metrics", "SPICE"]) == 2
    assert "no metric could be computed" in capsys.readouterr().err


def test_line_breaks_inside_captions_do_not_shift_the_ptb_tokenizer(tmp_path) -> None:
    import shutil

    from captioning.metrics.coco import score_captions

    if shutil.which("java") is None:
        pytest.skip("the PTB tokenizer needs Java")
    refs = {
        i: [f"a {c} circle on the left", f"the {c} circle"] for i, c in enumerate(["red", "blue", "green"])
    }
    clean = {0: "a red circle", 1: "a blue circle", 2: "a green circle"}
    broken = {0: "a red\rcircle", 1: "a blue\u2028circle", 2: "a green\x85circle"}
    kwargs = {"metrics": ("Bleu_4", "CIDEr"), "tokenizer": "ptb"}
    assert score_captions(refs, broken, **kwargs) == pytest.approx(score_captions(refs, clean, **kwargs))


@pytest.mark.parametrize(
    "tensor,fragment",
    [
        (torch.full((3, 8, 8), float("nan")), "NaN/inf"),
        (torch.rand(3, 0, 5), "(3, 0, 5)"),
        (torch.rand(3, 8, 8) * 255, "values in [0, 1]"),
    ],
)
def test_the_api_refuses_tensors_it_would_caption_wrongly(good_checkpoint, tensor, fragment) -> None:
    from captioning import Captioner

    with pytest.raises(ValueError, match=re.escape(fragment)):
        Captioner.from_checkpoint(good_checkpoint).caption(tensor)


def test_sampling_flags_work_with_a_beam_search_checkpoint(good_checkpoint, photo, capsys) -> None:
    argv = ["caption", str(photo), "--checkpoint", str(good_checkpoint), "--do-sample", "--top-p", "0.9",
            "--num-return-sequences", "3", "--seed", "0", "--json"]  # fmt: skip
    assert captioning_main(argv) == 0
    assert len(json.loads(capsys.readouterr().out)["candidates"]) == 3


@pytest.mark.parametrize(
    "flags,fragment",
    [
        (["--do-sample", "--temperature", "inf"], "temperature=inf"),
        (["--do-sample", "--seed", "99999999999999999999999"], "--seed"),
        (["--device", "meta"], "device='meta'"),
    ],
)
def test_more_bad_flags_are_one_line(flags, fragment, good_checkpoint, photo, capsys) -> None:
    assert captioning_main(["caption", str(photo), "--checkpoint", str(good_checkpoint), *flags]) == 2
    assert_one_line(capsys.readouterr().err, fragment)


ROUND2_TRAIN = {
    "seed_range": (["seed=-1"], "seed=-1"),
    "image_size": (["data.image_size=0"], "data.image_size=0"),
    "workers": (["data.num_workers=-1"], "data.num_workers=-1"),
    "weight_decay": (["model.optimizer.weight_decay=-1"], "model.optimizer.weight_decay=-1"),
    "val_interval": (["trainer.val_check_interval=0"], "trainer.val_check_interval=0"),
    "no_images": (["data.train.num_images=0"], "data.train.num_images=0"),
    "scst_without_init": (["objective=scst"], "objective=scst starts from a cross-entropy checkpoint"),
    "precision": (["trainer.precision=bogus"], "trainer: Precision 'bogus' is invalid"),
}


@pytest.mark.parametrize("case", sorted(ROUND2_TRAIN))
def test_more_bad_training_configs_are_one_line(case, tmp_path, monkeypatch, capsys) -> None:
    argv, culprit = ROUND2_TRAIN[case]
    assert run_train(argv, tmp_path / "run", monkeypatch) == 2
    assert_one_line(capsys.readouterr().err, "captioning-train: error:", culprit)


def test_a_run_that_never_validated_names_its_last_checkpoint(tmp_path) -> None:
    from captioning.training.train import train

    from conftest import TINY, compose_train

    best = train(compose_train([*TINY, "trainer.max_steps=2"], tmp_path))
    assert best == str(tmp_path / "checkpoints" / "last.ckpt") and Path(best).is_file()


@pytest.mark.parametrize(
    "override,fragment",
    [
        ("foo=1", "foo: no such config key"),
        ("trainer.max_epoch=1", "trainer.max_epoch: no such config key; did you mean trainer.max_epochs?"),
        ("modle.decoder.alpha_c=1", "did you mean model.decoder.alpha_c?"),
        ("model/decoder=bogus", "Could not find 'model/decoder/bogus'"),
    ],
)
def test_a_config_hydra_cannot_compose_is_one_line_and_exit_2(
    override, fragment, tmp_path, monkeypatch, capsys
):
    from captioning.training.train import cli

    monkeypatch.setattr(
        sys, "argv", ["captioning-train", "debug=tiny", override, f"hydra.run.dir={tmp_path}"]
    )
    with pytest.raises(SystemExit) as info:
        cli()
    assert info.value.code == 2
    line = assert_one_line(capsys.readouterr().err, "captioning-train: error:", fragment)
    assert "Config search path" not in line


def test_a_symlinked_sub_folder_inside_the_image_folder_is_allowed_and_escapes_are_not(tmp_path) -> None:
    from captioning.data.readers import DatasetError, read_coco

    images, elsewhere = tmp_path / "val2014", tmp_path / "disk2"
    images.mkdir()
    elsewhere.mkdir()
    Image.new("RGB", (8, 8)).save(elsewhere / "a.png")
    (images / "sub").symlink_to(elsewhere)
    ann = tmp_path / "captions.json"
    entry = {
        "images": [{"id": 1, "file_name": "sub/a.png"}],
        "annotations": [{"id": 1, "image_id": 1, "caption": "a dog"}],
    }
    ann.write_text(json.dumps(entry))
    assert [r.image_id for r in read_coco(ann, images)] == [1]
    entry["images"][0]["file_name"] = "sub/../../disk2/a.png"
    ann.write_text(json.dumps(entry))
    with pytest.raises(DatasetError, match="outside"):
        read_coco(ann, images)
    entry["images"][0]["file_name"] = "."
    ann.write_text(json.dumps(entry))
    with pytest.raises(DatasetError, match="is a folder; expected an image file"):
        read_coco(ann, images)


def test_a_legacy_pickle_is_refused_in_one_line_without_torch_warnings(photo, tmp_path, capsys) -> None:
    import os
    import pickle

    bad = tmp_path / "rp.ckpt"
    bad.write_bytes(pickle.dumps(os.getcwd))
    assert captioning_main(["caption", str(photo), "--checkpoint", str(bad)]) == 2
    assert_one_line(capsys.readouterr().err, str(bad))


def test_plot_names_a_metrics_file_that_is_not_utf8(tmp_path, capsys) -> None:
    (tmp_path / "metrics.csv").write_bytes(b"step,train/loss\n1,\xff\n")
    assert captioning_main(["plot", str(tmp_path)]) == 2
    assert_one_line(capsys.readouterr().err, "metrics.csv", "not UTF-8")


def test_a_folder_without_images_and_an_unwritable_run_folder_are_one_line(
    good_checkpoint, tmp_path, monkeypatch, capsys
):
    from captioning.training.train import cli

    empty = tmp_path / "empty"
    empty.mkdir()
    assert captioning_main(["caption", str(empty), "--checkpoint", str(good_checkpoint)]) == 2
    assert "holds no image files" in capsys.readouterr().err
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setattr(sys, "argv", ["captioning-train", "debug=tiny", f"hydra.run.dir={blocked}/run"])
    with pytest.raises(SystemExit) as info:
        cli()
    assert info.value.code == 2
    assert_one_line(capsys.readouterr().err, "cannot create the run folder")


def test_files_a_folder_leaves_out_for_their_suffix_are_named(good_checkpoint, photo, tmp_path, capsys):
    folder = tmp_path / "shots"
    folder.mkdir()
    photo.rename(folder / "photo.png")
    (folder / "notes.txt").write_text("not an image")
    (folder / "raw.cr2").write_bytes(b"\x00" * 16)
    assert captioning_main(["caption", str(folder), "--checkpoint", str(good_checkpoint)]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1 and str(folder / "photo.png") in out  # the image is captioned
    line = assert_one_line(err, str(folder), "left out 2 entries", "notes.txt", "raw.cr2")
    assert line.startswith("note:")


def test_a_fresh_run_in_a_folder_with_checkpoints_is_refused_and_overwrites_nothing(
    tmp_path, monkeypatch, capsys
) -> None:
    earlier = tmp_path / "run" / "checkpoints" / "last.ckpt"
    earlier.parent.mkdir(parents=True)
    earlier.write_bytes(b"an earlier run's weights")
    assert run_train([], tmp_path / "run", monkeypatch) == 2
    assert_one_line(capsys.readouterr().err, str(earlier.parent), "last.ckpt", "ckpt_path=last")
    assert earlier.read_bytes() == b"an earlier run's weights"


def test_a_png_key_colour_is_composited_on_white(tmp_path: Path) -> None:
    from captioning.data.images import load_rgb

    pixels = np.zeros((4, 4, 3), dtype=np.uint8)
    pixels[:2] = (10, 200, 30)  # the top half is the key colour (tRNS): transparent
    path = tmp_path / "key.png"
    Image.fromarray(pixels).save(path, transparency=(10, 200, 30))
    assert "transparency" in Image.open(path).info
    rgb = np.asarray(load_rgb(path))
    assert (rgb[:2] == 255).all() and (rgb[2:] == 0).all()  # key -> white, the black half kept


def test_a_fully_transparent_image_is_white_with_a_warning_naming_it(tmp_path: Path, caplog) -> None:
    import logging

    from captioning.data.images import load_rgb

    path = tmp_path / "clear.png"
    Image.new("RGBA", (6, 6), (200, 0, 0, 0)).save(path)
    with caplog.at_level(logging.WARNING, logger="captioning.data.images"):
        rgb = np.asarray(load_rgb(path))
    assert (rgb == 255).all()
    assert f"{path}: fully transparent" in caplog.text
