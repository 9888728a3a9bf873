"""`captioning caption` end to end on a tiny checkpoint built directly (no training: the CLI's output
does not depend on how good the weights are)."""

import json

import numpy as np
import pytest
from PIL import Image

from captioning.cli.main import main
from captioning.data.synthetic import render_scene

from corpus import write_checkpoint


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    return str(write_checkpoint(tmp_path_factory.mktemp("tiny") / "model.ckpt"))


@pytest.fixture
def scene_files(tmp_path):
    paths = []
    for i in range(2):
        path = tmp_path / f"scene{i}.png"
        Image.fromarray(render_scene((99, i)).image).save(path)
        paths.append(path)
    return paths


def test_caption_json_shapes(tiny_checkpoint, scene_files, capsys):
    assert main(["caption", *map(str, scene_files), "--checkpoint", tiny_checkpoint, "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2
    for line, path in zip(lines, scene_files):
        obj = json.loads(line)
        assert set(obj) == {"image", "caption", "tokens", "grid", "attention", "token_log_probs", "score"}
        assert obj["image"] == str(path) and obj["grid"] == [3, 3]
        assert obj["caption"] == " ".join(obj["tokens"])
        assert "<start>" not in obj["tokens"] and "<end>" not in obj["tokens"]
        assert len(obj["attention"]) == len(obj["tokens"])
        for row in obj["attention"]:
            assert len(row) == 9 and abs(sum(row) - 1.0) < 1e-4
        assert obj["score"] <= 0.0


def test_caption_beam_and_overlay(tiny_checkpoint, scene_files, tmp_path, capsys):
    overlay = tmp_path / "att.png"
    code = main(
        [
            "caption",
            str(scene_files[0]),
            "--checkpoint",
            tiny_checkpoint,
            "--num-beams",
            "3",
            "--max-new-tokens",
            "4",
            "--overlay",
            str(overlay),
        ]
    )
    assert code == 0
    image, caption = capsys.readouterr().out.strip().split("\t")[:2]
    assert image == str(scene_files[0]) and len(caption.split()) <= 4
    png = np.asarray(Image.open(overlay))
    assert png.ndim == 3 and png.shape[0] > 100 and png.shape[1] > 100
    assert png[..., :3].std() > 5  # an actual picture, not a blank canvas


def test_caption_reports_bad_files_and_exits_nonzero(tiny_checkpoint, scene_files, tmp_path, capsys):
    bad = tmp_path / "notes.jpg"
    bad.write_text("this is not a JPEG")
    missing = tmp_path / "missing.png"
    code = main(["caption", str(scene_files[0]), str(bad), str(missing), "--checkpoint", tiny_checkpoint])
    captured = capsys.readouterr()
    assert code == 1
    assert captured.out.startswith(str(scene_files[0]))  # the good image is still captioned
    assert f"{bad}: not a readable image" in captured.err and f"{missing}: no such image file" in captured.err


def test_caption_refuses_a_non_checkpoint(tmp_path, scene_files, capsys):
    fake = tmp_path / "model.ckpt"
    fake.write_bytes(b"\x00" * 100)
    assert main(["caption", str(scene_files[0]), "--checkpoint", str(fake)]) == 2
    assert "not a readable checkpoint" in capsys.readouterr().err


def test_sampled_n_best_prints_the_best_scored_caption(tiny_checkpoint, scene_files, capsys):
    args = ["caption", str(scene_files[0]), "--checkpoint", tiny_checkpoint, "--do-sample", "--seed", "1",
            "--num-return-sequences", "8", "--temperature", "3.0"]  # fmt: skip
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    scores = [c["score"] for c in out["candidates"]]
    assert len({c["caption"] for c in out["candidates"]}) > 1 and scores == sorted(scores, reverse=True)
    assert out["caption"] == out["candidates"][0]["caption"] and out["score"] == max(scores)
    assert main(args) == 0
    assert capsys.readouterr().out.split("\t")[1].strip() == out["caption"]


def test_caption_refuses_hard_attention_for_a_soft_model(tiny_checkpoint, scene_files, capsys):
    args = ["caption", str(scene_files[0]), "--checkpoint", tiny_checkpoint, "--hard-attention", "expected"]
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and "hard_attention='expected': this model's attention is soft" in err
    assert len(err.strip().splitlines()) == 1


def test_caption_fails_when_every_caption_is_empty_naming_the_checkpoint(scene_files, tmp_path, capsys):
    import torch

    from captioning.data.vocab import Vocab

    from corpus import build_module, checkpoint_dict

    checkpoint = checkpoint_dict(build_module(["a", "red", "circle"]))
    checkpoint["state_dict"]["net.decoder.out.bias"][Vocab.end_id] = 3e4  # huge, finite: <end> at once
    torch.save(checkpoint, tmp_path / "ends.ckpt")
    assert main(["caption", *map(str, scene_files), "--checkpoint", str(tmp_path / "ends.ckpt")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "every caption of the batch is empty" in err and "ends.ckpt" in err


def test_caption_notes_once_that_a_synthetic_model_captions_photos(tmp_path, scene_files, capsys):
    from pathlib import Path

    photos = []
    for i in range(2):
        photos.append(tmp_path / f"photo{i}.jpg")
        Image.fromarray(np.random.default_rng(i).integers(0, 256, (150, 200, 3), dtype=np.uint8)).save(
            photos[-1]
        )
    synthetic = Path(__file__).resolve().parents[1] / "docs" / "models" / "synthetic_soft.safetensors"
    assert main(["caption", str(scene_files[0]), "--checkpoint", str(synthetic)]) == 0
    assert capsys.readouterr().err == ""  # a synthetic scene: nothing to say
    assert main(["caption", *map(str, photos), "--checkpoint", str(synthetic)]) == 0
    out, err = capsys.readouterr()
    assert len(out.strip().splitlines()) == 2
    assert err.count("trained on synthetic scenes") == 1 and err.startswith("note: ")
