"""The hostile-user corpus, end to end through the command lines: every kind of bad input of the
reliability issue (images, checkpoints, configs, annotation files, results files, flags, output paths).

Each case runs the real entry point (``captioning ...`` or ``captioning-train ...``) in this process and
asserts the exit status (2: nothing could be done; 1: the good inputs of the same call were processed,
the bad ones reported), that stderr says it in one line naming the culprit (file, key or flag) and never
a traceback, and, where the call also had good inputs, that they were processed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from captioning.checkpoints.format import CHECKPOINT_KEY
from captioning.cli.main import main as captioning_main
from captioning.inference.trained_on import synthetic_note

from support.corpus import write_bad_images
from support.hostile import (
    assert_one_line,
    error_lines,
    mutated,
    poison_weights,
    replace_config,
    run_train,
    set_config,
)

# ------------------------------------------------------------------------------ broken checkpoints


def written(out: Path, content: str | bytes) -> Path:
    """``out`` holding ``content`` (write_text's return value is a count, not the path)."""
    out.write_bytes(content.encode() if isinstance(content, str) else content)
    return out


BROKEN_CHECKPOINTS = {
    "text": lambda good, out: written(out, "model: soft\nhidden_dim: 16\n"),
    "prose": lambda good, out: written(out, "This is not a checkpoint\n"),  # torch: IndexError
    "empty": lambda good, out: written(out, b""),
    "truncated": lambda good, out: written(out, good.read_bytes()[: good.stat().st_size // 2]),
    "garbage_net_config": lambda good, out: mutated(good, out, set_config("{{{ not: yaml")),
    "net_config_not_a_mapping": lambda good, out: mutated(good, out, set_config("- 1\n- 2\n")),
    "unregistered_target": lambda good, out: mutated(
        good,
        out,
        replace_config("captioning.models.encoders.SmallCNN", "captioning.data.sources.SyntheticSource"),
    ),
    "unresolvable_target": lambda good, out: mutated(
        good, out, replace_config("captioning.models.encoders.SmallCNN", "captioning.models.nothing.Here")
    ),
    "negative_size": lambda good, out: mutated(good, out, replace_config("hidden_dim: 16", "hidden_dim: -4")),
    "huge_size": lambda good, out: mutated(good, out, replace_config("hidden_dim: 16", "hidden_dim: 400000")),
    "env_interpolation": lambda good, out: mutated(
        good, out, replace_config("hidden_dim: 16", "hidden_dim: ${oc.env:HOME}")
    ),
    "unknown_decoding_key": lambda good, out: mutated(
        good, out, lambda c: c[CHECKPOINT_KEY]["decoding"].__setitem__("beam_witdh", 3)
    ),
    "non_finite_weights": lambda good, out: mutated(good, out, poison_weights),
    "weights_of_another_model": lambda good, out: mutated(
        good, out, lambda c: c["state_dict"].pop(next(iter(c["state_dict"])))
    ),
}


@pytest.mark.parametrize("kind", sorted(BROKEN_CHECKPOINTS))
def test_a_broken_checkpoint_is_one_line_and_exit_2_in_every_command(
    kind: str, good_checkpoint: Path, photo: Path, tmp_path: Path, capsys
) -> None:
    bad = BROKEN_CHECKPOINTS[kind](good_checkpoint, tmp_path / f"{kind}.ckpt")
    assert captioning_main(["caption", str(photo), "--checkpoint", str(bad)]) == 2
    out, err = capsys.readouterr()
    line = assert_one_line(err, str(bad))
    assert out == "" and "weights_only=False" not in line  # nothing captioned; no advice to unpickle
    assert captioning_main(["export", str(bad), str(tmp_path / "out.safetensors")]) == 2
    assert_one_line(capsys.readouterr().err, str(bad))
    assert not (tmp_path / "out.safetensors").exists()


def test_the_good_checkpoint_of_the_corpus_captions(good_checkpoint: Path, photo: Path, capsys) -> None:
    assert captioning_main(["caption", str(photo), "--checkpoint", str(good_checkpoint)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"{photo}\t")
    assert error_lines(err) == [
        f"captioning caption: note: {synthetic_note(good_checkpoint)}"
    ]  # a scene model


# ------------------------------------------------------------------- images beside good images


def test_every_bad_image_is_named_while_the_good_ones_are_captioned(
    good_checkpoint: Path, photo: Path, tmp_path: Path, capsys
) -> None:
    bad = write_bad_images(tmp_path / "bad")
    fifo = tmp_path / "bad" / "pipe.jpg"
    import os

    os.mkfifo(fifo)
    second = tmp_path / "second.jpg"
    Image.open(photo).save(second)
    args = [str(photo), *(str(p) for p, _ in bad.values()), str(fifo), "/dev/zero", str(second)]
    assert captioning_main(["caption", *args, "--checkpoint", str(good_checkpoint), "--batch-size", "3"]) == 1
    out, err = capsys.readouterr()
    assert [line.split("\t")[0] for line in out.splitlines()] == [str(photo), str(second)]
    lines = error_lines(err)
    for path, fragment in bad.values():
        assert any(str(path) in line and fragment in line for line in lines), path
    assert any(str(fifo) in line and "not a regular file" in line for line in lines)
    assert any("/dev/zero" in line and "not a regular file" in line for line in lines)
    assert lines[-1] == f"captioning caption: {len(bad) + 2} of {len(args)} images could not be read"
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "mode,values",
    [
        ("F", np.array([[0.0, 0.25], [0.75, 1.0]], np.float32)),
        ("I", np.array([[0, 1000], [30000, 65535]], np.int32)),
    ],
)
def test_float_and_32_bit_images_are_captioned_from_their_real_contrast(
    mode: str, values: np.ndarray, good_checkpoint: Path, tmp_path: Path, capsys
) -> None:
    from captioning.data.images import load_rgb

    path = tmp_path / f"{mode}.tiff"
    Image.fromarray(np.kron(values, np.ones((8, 8), values.dtype)), mode=mode).save(path)
    pixels = np.asarray(load_rgb(path))
    assert pixels.min() == 0 and pixels.max() == 255  # neither all black nor all white
    assert captioning_main(["caption", str(path), "--checkpoint", str(good_checkpoint)]) == 0
    assert capsys.readouterr().out.startswith(f"{path}\t")


# --------------------------------------------------------------------------------- flags and paths


@pytest.mark.parametrize(
    "flag,value",
    [
        ("--num-beams", "0"),
        ("--max-new-tokens", "0"),
        ("--batch-size", "0"),
        ("--temperature", "-1"),
        ("--top-p", "1.5"),
        ("--num-return-sequences", "0"),
        ("--no-repeat-ngram-size", "-2"),
        ("--device", "tpu"),
    ],
)
def test_a_bad_flag_is_one_line_naming_it_before_any_image_is_read(
    flag: str, value: str, good_checkpoint: Path, photo: Path, capsys, monkeypatch
) -> None:
    import captioning.data.images as images

    monkeypatch.setattr(images, "load_rgb", lambda *a: pytest.fail("an image was read"))
    assert captioning_main(["caption", str(photo), "--checkpoint", str(good_checkpoint), flag, value]) == 2
    name = flag.removeprefix("--").replace("-", "_")
    line = assert_one_line(capsys.readouterr().err)
    assert name in line or flag in line, line
    assert value in line, line


def test_an_unwritable_overlay_is_refused_before_any_image_is_decoded(
    good_checkpoint: Path, photo: Path, tmp_path: Path, capsys
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    argv = ["caption", str(photo), "--checkpoint", str(good_checkpoint), "--overlay", str(blocked / "o.png")]
    assert captioning_main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""  # nothing done, so nothing lost (a write failing later: test_hostile_round5.py)
    assert_one_line(err, str(blocked / "o.png"), f"cannot create the folder {blocked}")


# ----------------------------------------------------------------------------------- results files


@pytest.mark.parametrize(
    "content,fragment",
    [
        ('{"image_id": 1, "caption": "a red circle"}', "the top level is a JSON dict"),
        ('[{"image_id": [1], "caption": "a red circle"}]', "image_id"),
        ('[{"image_id": null, "caption": "a red circle"}]', "image_id"),
        ('[{"image_id": 1, "caption": 5}]', "caption"),
        ('[{"image_id": 1, "caption": "a', "JSON"),
        ("\xff\xfe", "UTF-8"),
    ],
)
def test_a_bad_results_file_is_one_line_naming_it(
    content: str, fragment: str, references: Path, tmp_path: Path, capsys
) -> None:
    results = tmp_path / "results.json"
    results.write_bytes(content.encode("latin-1"))
    assert (
        captioning_main(["score", str(results), "--references", str(references), "--tokenizer", "simple"])
        == 2
    )
    line = assert_one_line(capsys.readouterr().err, str(results))
    assert fragment in line, line


def test_an_unwritable_scores_file_loses_no_score(references: Path, tmp_path: Path, capsys) -> None:
    results = tmp_path / "results.json"
    results.write_text('[{"image_id": 1, "caption": "a red circle"}, {"image_id": 2, "caption": "a square"}]')
    blocked = tmp_path / "file"
    blocked.write_text("")
    argv = ["score", str(results), "--references", str(references), "--tokenizer", "simple"]
    assert captioning_main([*argv, "--metrics", "Bleu_1", "--out", str(blocked / "s.json")]) == 1
    out, err = capsys.readouterr()
    assert "Bleu_1" in out
    assert_one_line(err, str(blocked / "s.json"), "cannot write the scores")


# ------------------------------------------------------------------- training configs and data files


def _karpathy_file(tmp_path: Path, payload: bytes) -> list[str]:
    root = tmp_path / "images"
    root.mkdir(exist_ok=True)
    Image.new("RGB", (8, 8)).save(root / "a.jpg")
    path = tmp_path / "dataset_flickr8k.json"
    path.write_bytes(payload)
    return [
        "data=karpathy",
        f"data.train.records.dataset_json={path}",
        f"data.train.records.image_root={root}",
        f"data.val.records.dataset_json={path}",
        f"data.val.records.image_root={root}",
    ]


ENTRY = {"filename": "a.jpg", "imgid": 1, "sentences": [{"raw": "a dog runs"}]}
TRAIN_CASES = {
    "seed": (["seed=abc"], "seed='abc'"),
    "max_steps": (["trainer.max_steps=abc"], "trainer.max_steps='abc'"),
    "lr": (["model.optimizer.lr=-0.1"], "model.optimizer.lr=-0.1"),
    "max_new_tokens": (["model.decoding.max_new_tokens=0"], "max_new_tokens=0"),
    "val_metrics": (["model.val_metrics=[BLEU4]"], "model.val_metrics"),
    "monitor": (["callbacks.model_checkpoint.monitor=val/CIDER"], "callbacks.model_checkpoint.monitor"),
    "min_word_count": (["data.min_word_count=100000"], "data.min_word_count=100000"),
    "max_caption_length": (["data.max_caption_length=0"], "data.max_caption_length=0"),
    "attention_dim": (["model.decoder.attention.attention_dim=0"], "model.decoder.attention.attention_dim=0"),
    "hidden_dim": (["model.decoder.hidden_dim=400000"], "model.decoder.hidden_dim=400000"),
    "feature_dim": (["model.decoder.feature_dim=32"], "feature_dim=32"),
    "missing_resume": (["ckpt_path=/nonexistent/last.ckpt"], "/nonexistent/last.ckpt"),
    "missing_data_file": (
        ["data=karpathy", "data.train.records.dataset_json=/nonexistent.json"],
        "/nonexistent.json",
    ),
}
KARPATHY_CASES = {
    "not_utf8": ('{"images": [{"split": "train", "x": "caf\xe9"}]}'.encode("latin-1"), "not UTF-8 text"),
    "deeply_nested": (b"[" * 200_000 + b"]" * 200_000, "nested deeper"),
    "split_names_match_nothing": (
        json.dumps({"images": [{**ENTRY, "split": "TRAIN"}]}).encode(),
        "split names found: 'TRAIN' (1)",
    ),
    "top_level_list": (b"[]", "expected a JSON object"),
    "escaping_file_name": (
        json.dumps({"images": [{**ENTRY, "split": "train", "filename": "../../../etc/passwd"}]}).encode(),
        "outside",
    ),
}


@pytest.mark.parametrize("case", sorted(TRAIN_CASES))
def test_a_bad_training_config_is_one_line_and_exit_2(case: str, tmp_path: Path, monkeypatch, capsys) -> None:
    argv, culprit = TRAIN_CASES[case]
    assert run_train(argv, tmp_path / "run", monkeypatch) == 2
    assert_one_line(capsys.readouterr().err, "captioning-train: error:", culprit)
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize("case", sorted(KARPATHY_CASES))
def test_a_bad_annotation_file_is_one_line_naming_it_and_exit_2(
    case: str, tmp_path: Path, monkeypatch, capsys
) -> None:
    payload, fragment = KARPATHY_CASES[case]
    argv = _karpathy_file(tmp_path, payload)
    assert run_train(argv, tmp_path / "run", monkeypatch) == 2
    assert_one_line(capsys.readouterr().err, "dataset_flickr8k.json", fragment)


def test_a_bad_evaluate_override_is_one_line_and_exit_2(good_checkpoint: Path, capsys) -> None:
    argv = ["evaluate", "--checkpoint", str(good_checkpoint), "data=synthetic", "decoding.num_beams=0"]
    assert captioning_main(argv) == 2
    assert_one_line(capsys.readouterr().err, "captioning evaluate: error:", "num_beams=0")
