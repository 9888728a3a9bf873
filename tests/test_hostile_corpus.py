"""The hostile-user corpus, end to end through the command lines: every kind of bad input of the
reliability issue (images, checkpoints, configs, annotation files, results files, flags, output paths).

Each case runs the real entry point (``captioning ...`` or ``captioning-train ...``) in this process and
asserts the exit status (2: nothing could be done; 1: the good inputs of the same call were processed,
the bad ones reported), that stderr says it in one line naming the culprit (file, key or flag) and never
a traceback, and, where the call also had good inputs, that they were processed.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from captioning.checkpoints.format import CHECKPOINT_KEY
from captioning.cli.main import main as captioning_main

from corpus import write_bad_images, write_checkpoint


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


def _assert_one_line(err: str, *culprits: str) -> str:
    lines = _error_lines(err)
    assert len(lines) == 1, lines
    assert "Traceback" not in err
    for culprit in culprits:
        assert culprit in lines[0], (culprit, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def good_checkpoint(tmp_path_factory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "good.ckpt")


@pytest.fixture
def photo(tmp_path: Path) -> Path:
    path = tmp_path / "photo.png"
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (40, 56, 3), dtype=np.uint8)).save(path)
    return path


# ------------------------------------------------------------------------------ broken checkpoints


def _mutated(good: Path, out: Path, mutate) -> Path:
    checkpoint = torch.load(good, weights_only=True)
    mutate(checkpoint)
    torch.save(checkpoint, out)
    return out


def _set_config(text: str):
    return lambda c: c[CHECKPOINT_KEY].__setitem__("net_config", text)


def _replace_config(old: str, new: str):
    return lambda c: c[CHECKPOINT_KEY].__setitem__(
        "net_config", c[CHECKPOINT_KEY]["net_config"].replace(old, new)
    )


def _poison_weights(c: dict) -> None:
    name = next(k for k in c["state_dict"] if k.endswith("weight"))
    c["state_dict"][name].view(-1)[0] = math.inf


BROKEN_CHECKPOINTS = {
    "text": lambda good, out: out.write_text("model: soft\nhidden_dim: 16\n") or out,
    "prose": lambda good, out: out.write_text("This is not a checkpoint\n") or out,  # torch: IndexError
    "empty": lambda good, out: out.write_bytes(b"") or out,
    "truncated": lambda good, out: out.write_bytes(good.read_bytes()[: good.stat().st_size // 2]) or out,
    "garbage_net_config": lambda good, out: _mutated(good, out, _set_config("{{{ not: yaml")),
    "net_config_not_a_mapping": lambda good, out: _mutated(good, out, _set_config("- 1\n- 2\n")),
    "unregistered_target": lambda good, out: _mutated(
        good,
        out,
        _replace_config("captioning.models.encoders.SmallCNN", "captioning.data.sources.SyntheticSource"),
    ),
    "unresolvable_target": lambda good, out: _mutated(
        good, out, _replace_config("captioning.models.encoders.SmallCNN", "captioning.models.nothing.Here")
    ),
    "negative_size": lambda good, out: _mutated(
        good, out, _replace_config("hidden_dim: 16", "hidden_dim: -4")
    ),
    "huge_size": lambda good, out: _mutated(
        good, out, _replace_config("hidden_dim: 16", "hidden_dim: 400000")
    ),
    "env_interpolation": lambda good, out: _mutated(
        good, out, _replace_config("hidden_dim: 16", "hidden_dim: ${oc.env:HOME}")
    ),
    "unknown_decoding_key": lambda good, out: _mutated(
        good, out, lambda c: c[CHECKPOINT_KEY]["decoding"].__setitem__("beam_witdh", 3)
    ),
    "non_finite_weights": lambda good, out: _mutated(good, out, _poison_weights),
    "weights_of_another_model": lambda good, out: _mutated(
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
    line = _assert_one_line(err, str(bad))
    assert out == "" and "weights_only=False" not in line  # nothing captioned; no advice to unpickle
    assert captioning_main(["export", str(bad), str(tmp_path / "out.safetensors")]) == 2
    _assert_one_line(capsys.readouterr().err, str(bad))
    assert not (tmp_path / "out.safetensors").exists()


def test_the_good_checkpoint_of_the_corpus_captions(good_checkpoint: Path, photo: Path, capsys) -> None:
    assert captioning_main(["caption", str(photo), "--checkpoint", str(good_checkpoint)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"{photo}\t") and _error_lines(err) == []


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
    lines = _error_lines(err)
    for path, fragment in bad.values():
        assert any(str(path) in line and fragment in line for line in lines), path
    assert any(str(fifo) in line and "not a regular file" in line for line in lines)
    assert any("/dev/zero" in line and "not a regular file" in line for line in lines)
    assert lines[-1] == f"{len(bad) + 2} of {len(args)} images could not be read"
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
    line = _assert_one_line(capsys.readouterr().err)
    assert name in line or flag in line, line
    assert value in line, line


def test_an_unwritable_overlay_loses_no_caption(
    good_checkpoint: Path, photo: Path, tmp_path: Path, capsys
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    argv = ["caption", str(photo), "--checkpoint", str(good_checkpoint), "--overlay", str(blocked / "o.png")]
    assert captioning_main(argv) == 1
    out, err = capsys.readouterr()
    assert out.startswith(f"{photo}\t")
    assert str(blocked / "o.png") in err and "cannot write the overlay" in err and "Traceback" not in err


# ----------------------------------------------------------------------------------- results files


@pytest.fixture
def references(tmp_path: Path) -> Path:
    refs = {
        "images": [{"id": 1}, {"id": 2}],
        "annotations": [
            {"id": 10, "image_id": 1, "caption": "a red circle"},
            {"id": 11, "image_id": 2, "caption": "a blue square"},
        ],
    }
    path = tmp_path / "refs.json"
    path.write_text(json.dumps(refs))
    return path


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
    line = _assert_one_line(capsys.readouterr().err, str(results))
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
    _assert_one_line(err, str(blocked / "s.json"), "cannot write the scores")


# ------------------------------------------------------------------- training configs and data files


def _train(argv: list[str], run_dir: Path, monkeypatch) -> int:
    from captioning.training.train import main as train_main

    monkeypatch.setattr(sys, "argv", ["captioning-train", "debug=tiny", *argv, f"hydra.run.dir={run_dir}"])
    with pytest.raises(SystemExit) as info:
        train_main()
    return info.value.code


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
    assert _train(argv, tmp_path / "run", monkeypatch) == 2
    _assert_one_line(capsys.readouterr().err, "captioning-train: error:", culprit)
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize("case", sorted(KARPATHY_CASES))
def test_a_bad_annotation_file_is_one_line_naming_it_and_exit_2(
    case: str, tmp_path: Path, monkeypatch, capsys
) -> None:
    payload, fragment = KARPATHY_CASES[case]
    argv = _karpathy_file(tmp_path, payload)
    assert _train(argv, tmp_path / "run", monkeypatch) == 2
    _assert_one_line(capsys.readouterr().err, "dataset_flickr8k.json", fragment)


def test_a_bad_evaluate_override_is_one_line_and_exit_2(good_checkpoint: Path, capsys) -> None:
    argv = ["evaluate", "--checkpoint", str(good_checkpoint), "data=synthetic", "decoding.num_beams=0"]
    assert captioning_main(argv) == 2
    _assert_one_line(capsys.readouterr().err, "captioning evaluate: error:", "num_beams=0")


# ------------------------------------------------------------- round 2: an independent tester's cases


def test_a_yaml_alias_bomb_in_a_checkpoint_is_refused_before_parsing(
    good_checkpoint, photo, tmp_path, capsys
):
    bomb = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{n}: &{n} [{','.join(['*' + p] * 9)}]\n" for p, n in zip("abcdef", "bcdefg")
    )
    bad = _mutated(good_checkpoint, tmp_path / "bomb.ckpt", _set_config(bomb + "encoder: {}\n"))
    assert captioning_main(["caption", str(photo), "--checkpoint", str(bad)]) == 2  # in milliseconds
    _assert_one_line(capsys.readouterr().err, str(bad), "anchors/aliases")


def test_vocabulary_words_with_whitespace_are_refused(good_checkpoint, photo, tmp_path, capsys):
    def spaced(c: dict) -> None:
        c[CHECKPOINT_KEY]["vocab"]["itos"][5] = "two\nlines"

    bad = _mutated(good_checkpoint, tmp_path / "nl.ckpt", spaced)
    assert captioning_main(["caption", str(photo), "--checkpoint", str(bad)]) == 2
    _assert_one_line(capsys.readouterr().err, str(bad), "vocabulary word 5")


def test_an_overlay_never_overwrites_an_input_and_its_format_is_checked_first(
    good_checkpoint, photo, tmp_path, capsys
):
    before = photo.read_bytes()
    argv = ["caption", str(photo), "--checkpoint", str(good_checkpoint)]
    assert captioning_main([*argv, "--overlay", str(photo)]) == 2
    _assert_one_line(capsys.readouterr().err, "would overwrite the input image")
    assert photo.read_bytes() == before
    argv2 = ["caption", str(photo), str(photo), "--checkpoint", str(good_checkpoint)]
    assert captioning_main([*argv2, "--overlay", str(tmp_path / "att.txt")]) == 2
    out, err = capsys.readouterr()
    _assert_one_line(err, "att.txt", "not an image format")
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
    huge = _mutated(good_checkpoint, tmp_path / "huge.ckpt", lambda c: next(
        v for k, v in c["state_dict"].items() if k.endswith("weight")).fill_(1e6))  # fmt: skip
    capsys.readouterr()
    assert captioning_main(["export", str(huge), str(out), "--fp16"]) == 2
    _assert_one_line(capsys.readouterr().err, str(out), "float16")
    assert out.read_bytes() == good_export and not list(tmp_path.glob("*.partial"))
    source = good_checkpoint.read_bytes()
    assert captioning_main(["export", str(good_checkpoint), str(good_checkpoint)]) == 2
    _assert_one_line(capsys.readouterr().err, "is the checkpoint being exported")
    assert good_checkpoint.read_bytes() == source
    assert captioning_main(["export", str(out), str(tmp_path / "again.safetensors")]) == 2
    _assert_one_line(capsys.readouterr().err, "already a weights-only export")


def test_evaluate_prints_its_scores_before_an_unwritable_out_dir_fails(good_checkpoint, tmp_path, capsys):
    blocked = tmp_path / "file"
    blocked.write_text("")
    argv = ["evaluate", "--checkpoint", str(good_checkpoint), "--out-dir", str(blocked / "x"), "data=synthetic",
            "data.test.num_images=4", "tokenizer=simple", "decoding.num_beams=1"]  # fmt: skip
    assert captioning_main(argv) == 1
    out, err = capsys.readouterr()
    assert "CIDEr" in out
    _assert_one_line(err, str(blocked / "x"), "cannot write the results")


def test_score_refuses_an_out_over_its_input_and_a_run_that_computes_nothing(references, tmp_path, capsys):
    results = tmp_path / "results.json"
    results.write_text('[{"image_id": 1, "caption": "a red circle"}, {"image_id": 2, "caption": "a square"}]')
    before = results.read_bytes()
    argv = ["score", str(results), "--references", str(references), "--tokenizer", "simple"]
    assert captioning_main([*argv, "--out", str(results)]) == 2
    _assert_one_line(capsys.readouterr().err, "is an input file")
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
    _assert_one_line(capsys.readouterr().err, fragment)


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
    assert _train(argv, tmp_path / "run", monkeypatch) == 2
    _assert_one_line(capsys.readouterr().err, "captioning-train: error:", culprit)


def test_a_run_that_never_validated_names_its_last_checkpoint(tmp_path) -> None:
    from captioning.training.train import train

    from conftest import TINY, compose_train

    best = train(compose_train([*TINY, "trainer.max_steps=2"], tmp_path))
    assert best == str(tmp_path / "checkpoints" / "last.ckpt") and Path(best).is_file()


@pytest.mark.parametrize(
    "override,fragment",
    [("foo=1", "Could not override 'foo'"), ("model/decoder=bogus", "Could not find 'model/decoder/bogus'")],
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
    line = _assert_one_line(capsys.readouterr().err, "captioning-train: error:", fragment)
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
    _assert_one_line(capsys.readouterr().err, str(bad))


def test_plot_names_a_metrics_file_that_is_not_utf8(tmp_path, capsys) -> None:
    (tmp_path / "metrics.csv").write_bytes(b"step,train/loss\n1,\xff\n")
    assert captioning_main(["plot", str(tmp_path)]) == 2
    _assert_one_line(capsys.readouterr().err, "metrics.csv", "not UTF-8")


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
    _assert_one_line(capsys.readouterr().err, "cannot create the run folder")


def test_files_a_folder_leaves_out_for_their_suffix_are_named(good_checkpoint, photo, tmp_path, capsys):
    folder = tmp_path / "shots"
    folder.mkdir()
    photo.rename(folder / "photo.png")
    (folder / "notes.txt").write_text("not an image")
    (folder / "raw.cr2").write_bytes(b"\x00" * 16)
    assert captioning_main(["caption", str(folder), "--checkpoint", str(good_checkpoint)]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1 and str(folder / "photo.png") in out  # the image is captioned
    line = _assert_one_line(err, str(folder), "left out 2 entries", "notes.txt", "raw.cr2")
    assert line.startswith("note:")


def test_a_fresh_run_in_a_folder_with_checkpoints_is_refused_and_overwrites_nothing(
    tmp_path, monkeypatch, capsys
) -> None:
    earlier = tmp_path / "run" / "checkpoints" / "last.ckpt"
    earlier.parent.mkdir(parents=True)
    earlier.write_bytes(b"an earlier run's weights")
    assert _train([], tmp_path / "run", monkeypatch) == 2
    _assert_one_line(capsys.readouterr().err, str(earlier.parent), "last.ckpt", "ckpt_path=last")
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


# ------------------------------------------------------------------- round three (an independent corpus)


def _export(good: Path, out: Path) -> Path:
    from captioning.checkpoints.export import export_checkpoint

    return export_checkpoint(good, out)


def test_an_export_with_integer_weights_or_a_header_nested_too_deep_is_refused(
    good_checkpoint: Path, photo: Path, tmp_path: Path, capsys
) -> None:
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    export = _export(good_checkpoint, tmp_path / "good.safetensors")
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
        _assert_one_line(err, str(path), culprit)
        assert out == ""


def test_a_pipe_or_device_as_checkpoint_is_named_as_such(photo: Path, tmp_path: Path, capsys) -> None:
    import os

    fifo = tmp_path / "fifo.ckpt"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        assert captioning_main(["caption", str(photo), "--checkpoint", str(path)]) == 2
        _assert_one_line(capsys.readouterr().err, str(path), "is not a regular file")


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
    _assert_one_line(capsys.readouterr().err, str(target), "cannot write the export there")


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
        assert _error_lines(err)[-1] == "captioning caption: interrupted"


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
    _mutated(last, last, _poison_weights)
    capsys.readouterr()
    assert _train(["trainer.max_steps=4", "ckpt_path=last"], run, monkeypatch) == 2
    _assert_one_line(capsys.readouterr().err, str(last), "non-finite weights")


def test_a_full_disk_while_saving_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    import captioning.checkpoints.save as save

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(save.torch, "save", full)
    assert _train(["trainer.max_steps=2"], tmp_path / "run", monkeypatch) == 2
    _assert_one_line(capsys.readouterr().err, "could not write the checkpoint", "No space left on device")


def test_an_unreadable_init_from_is_refused_before_the_data_are_read(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    from captioning.data.sources import SyntheticSource

    bad = tmp_path / "prose.ckpt"
    bad.write_text("This is not a checkpoint\n")

    def refuse(*args, **kwargs):
        raise AssertionError("the data were read before init_from was checked")

    monkeypatch.setattr(SyntheticSource, "__init__", refuse)
    assert _train([f"init_from={bad}"], tmp_path / "run", monkeypatch) == 2
    _assert_one_line(capsys.readouterr().err, str(bad), "not a readable checkpoint")


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
    no_size = _mutated(
        good_checkpoint, tmp_path / "nosize.ckpt", lambda c: c[CHECKPOINT_KEY].pop("image_size")
    )
    as_list = _mutated(good_checkpoint, tmp_path / "list.ckpt", lambda c: c.__setitem__("state_dict", [1, 2]))
    for bad, culprit in ((no_size, "image_size = None"), (as_list, "'state_dict' is a list")):
        assert captioning_main(["caption", str(photo), "--checkpoint", str(bad)]) == 2
        _assert_one_line(capsys.readouterr().err, str(bad), culprit)


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
