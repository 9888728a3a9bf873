"""`captioning caption` end to end on a tiny checkpoint built directly (no training: the CLI's output
does not depend on how good the weights are)."""

import json

import numpy as np
import pytest
from PIL import Image

from captioning.cli.main import main
from captioning.data.synthetic import render_scene

from support.corpus import write_checkpoint


@pytest.fixture(scope="module")
def tiny_checkpoint(make_checkpoint):
    return str(make_checkpoint("model.ckpt"))


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


@pytest.mark.parametrize("existing", [True, False])
def test_overlay_into_a_folder_one_png_per_image_named_after_it_and_in_the_json(
    tiny_checkpoint, scene_files, tmp_path, capsys, existing
):
    folder = tmp_path / "overlays"
    if existing:
        folder.mkdir()
    given = str(folder) if existing else f"{folder}/"  # a new folder: named by its trailing /
    argv = ["caption", *map(str, scene_files), "--checkpoint", tiny_checkpoint, "--overlay", given, "--json"]
    assert main(argv) == 0  # was: "no suffix is not an image format"
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["overlay"] for r in records] == [str(folder / f"{p.stem}.png") for p in scene_files]
    assert sorted(folder.iterdir()) == [folder / f"{p.stem}.png" for p in scene_files]


def test_overlay_paths_of_one_pattern_are_numbered_and_named_and_documented(tmp_path):
    from captioning.cli.caption import overlay_paths
    from captioning.cli.main import build_parser

    out = tmp_path / "att.png"
    assert overlay_paths(out, ["a/x.jpg", "b/y.png"]) == [
        tmp_path / "att-00-x.png",
        tmp_path / "att-01-y.png",
    ]
    assert overlay_paths(tmp_path, ["a/x.jpg", "b/x.png"], folder=True) == [
        tmp_path / "x.png",
        tmp_path / "x-01.png",
    ]
    # a later file named like a numbered one, and a name differing only in case, get names of their own
    names = ["a/x.jpg", "b/x.jpg", "c/x-01.jpg", "d/X.JPG"]
    assert [p.name for p in overlay_paths(tmp_path, names, folder=True)] == [
        "x.png", "x-01.png", "x-01-02.png", "X-03.png",
    ]  # fmt: skip
    helptext = " ".join(build_parser()._subparsers._group_actions[0].choices["caption"].format_help().split())
    assert "OUT-NN-NAME.png" in helptext and "NAME.png inside it" in helptext


def test_a_transformer_overlay_says_it_is_head_averaged_cross_attention(tmp_path):
    from captioning import Captioner

    lstm = write_checkpoint(tmp_path / "lstm.ckpt")
    transformer = write_checkpoint(tmp_path / "tf.ckpt", extra=["model/decoder=transformer"])
    scene = Image.fromarray(render_scene((99, 0)).image)
    labels = {}
    for name, path in (("lstm", lstm), ("transformer", transformer)):
        model = Captioner.from_checkpoint(path)
        result = model.caption(scene)[0]
        labels[name] = result.attention_label
        if name == "transformer":  # the decoder declares its map: no isinstance check in the overlay
            layers = model.net.decoder.attention_layer + 1
            assert result.attention_label.startswith(f"cross-attention of layer {layers} of ")
            assert "mean over" in result.attention_label and "heads" in result.attention_label
        labelled = np.asarray(result.overlay(scene))
        unlabelled = np.asarray(result.overlay(scene, subtitle=None))
        assert labelled.shape[0] > unlabelled.shape[0]  # the label's line under the title
    assert "alpha_t" in labels["lstm"] and labels["lstm"] != labels["transformer"]


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

    from support.corpus import build_module, checkpoint_dict

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
    synthetic = Path(__file__).resolve().parents[2] / "docs" / "models" / "synthetic_soft.safetensors"
    assert main(["caption", str(scene_files[0]), "--checkpoint", str(synthetic)]) == 0
    assert capsys.readouterr().err == ""  # a synthetic scene: nothing to say
    assert main(["caption", *map(str, photos), "--checkpoint", str(synthetic)]) == 0
    out, err = capsys.readouterr()
    assert len(out.strip().splitlines()) == 2
    assert err.count("trained on synthetic scenes") == 1 and err.startswith("captioning caption: note: ")


# ------------------------------------------------------------------ file arguments checked before torch

MISSPELT = (
    "import sys\n"
    "from captioning.cli.main import main\n"
    "status = main(sys.argv[1:])\n"
    "print(status, 'torch' in sys.modules)\n"
)


def run_before_torch(cwd, *argv):
    """``captioning ARGV`` in a fresh interpreter: its exit status, whether torch was imported, its stderr."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", MISSPELT, *argv], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    status, torch_loaded = proc.stdout.split()
    return int(status), torch_loaded == "True", proc.stderr


@pytest.mark.parametrize("command", ["caption", "evaluate", "tune", "bank", "export"])
def test_a_misspelt_checkpoint_is_one_line_with_the_nearest_name_before_torch_is_imported(tmp_path, command):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "best.ckpt").write_bytes(b"not read")
    Image.new("RGB", (8, 8)).save(tmp_path / "photo.png")
    argv = {
        "caption": ["caption", "photo.png", "--checkpoint", "run/bets.ckpt"],
        "evaluate": ["evaluate", "--checkpoint", "run/bets.ckpt", "data=synthetic"],
        "tune": ["tune", "--checkpoint", "run/bets.ckpt"],
        "bank": ["bank", "--checkpoint", "run/bets.ckpt", "--out", "m.safetensors"],
        "export": ["export", "run/bets.ckpt", "out.safetensors"],
    }[command]
    status, torch_loaded, err = run_before_torch(tmp_path, *argv)
    assert (status, torch_loaded) == (2, False)
    assert err == (
        f"captioning {command}: error: run/bets.ckpt: no such checkpoint file; did you mean run/best.ckpt?\n"
    )


def test_a_misspelt_folder_a_folder_and_missing_images_are_named_before_torch_is_imported(tmp_path):
    (tmp_path / "runs" / "a").mkdir(parents=True)
    status, torch_loaded, err = run_before_torch(
        tmp_path, "caption", "x.png", "--checkpoint", "rusn/a/b.ckpt"
    )
    assert (status, torch_loaded) == (2, False)
    assert "rusn/a/b.ckpt: no such checkpoint file; did you mean runs/a/b.ckpt?" in err
    status, torch_loaded, err = run_before_torch(tmp_path, "caption", "x.png", "--checkpoint", "runs/a")
    assert (status, torch_loaded) == (2, False)
    assert err.splitlines() == [  # every file argument named, each on its line
        "captioning caption: error: runs/a: is a folder, not a checkpoint file",
        "captioning caption: error: x.png: no such image file or folder",
    ]
    (tmp_path / "model.ckpt").write_bytes(b"x")
    (tmp_path / "photo.png").write_bytes(b"x")
    status, torch_loaded, err = run_before_torch(
        tmp_path, "caption", "phoot.png", "--checkpoint", "model.ckpt"
    )
    assert (status, torch_loaded) == (2, False)
    assert (
        err == "captioning caption: error: phoot.png: no such image file or folder; did you mean photo.png?\n"
    )


def test_one_missing_image_among_good_ones_is_still_reported_beside_their_captions(
    tiny_checkpoint, scene_files, capsys
):
    missing = scene_files[0].with_name("scene9.png")
    assert main(["caption", str(scene_files[0]), str(missing), "--checkpoint", tiny_checkpoint]) == 1
    out, err = capsys.readouterr()
    assert out.startswith(f"{scene_files[0]}\t")
    assert f"{missing}: no such image file" in err


def test_a_glob_that_matches_nothing_is_named_as_a_pattern_beside_the_captions_of_the_rest(
    tiny_checkpoint, scene_files, capsys
):
    pattern = str(scene_files[0].with_name("nothing-*.png"))
    assert main(["caption", str(scene_files[0]), pattern, "--checkpoint", tiny_checkpoint]) == 1
    out, err = capsys.readouterr()
    assert out.startswith(f"{scene_files[0]}\t") and len(out.splitlines()) == 1
    assert f"error: {pattern}: no file or folder matches this pattern" in err
    assert "no such image file" not in err  # a pattern is not a file name
