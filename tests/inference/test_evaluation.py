"""`captioning evaluate` and captioning.inference.evaluation on a tiny checkpoint built directly (make_checkpoint)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from captioning.checkpoints.load import load_checkpoint
from captioning.cli.main import main
from captioning.data.sources import SyntheticSource
from captioning.inference.captioner import Captioner
from captioning.inference.evaluation import SplitCaptions, evaluate_checkpoint, synthetic_grounding
from captioning.metrics.coco import load_results, score_captions

from support.hostile import assert_one_line

TOOLKIT = ("Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "METEOR", "ROUGE_L", "CIDEr")


@pytest.fixture(scope="module")
def tiny_checkpoint(make_checkpoint):
    return str(make_checkpoint("tiny.ckpt"))


def test_evaluate_cli_writes_coco_results_and_official_scores(tiny_checkpoint, tmp_path, capsys):
    out = tmp_path / "eval"
    code = main(
        ["evaluate", "--checkpoint", tiny_checkpoint, "--out-dir", str(out), "data.test.num_images=8"]
    )
    printed = capsys.readouterr().out
    assert code == 0
    source = SyntheticSource(8, seed=0, split="test")
    references = {source.image_id(i): list(source.captions(i)) for i in range(8)}

    results = json.loads((out / "results.json").read_text())
    assert load_results(out / "results.json", references) == results  # pycocotools loadRes round trip
    assert [r["image_id"] for r in results] == list(range(8))

    scores = json.loads((out / "scores.json").read_text())
    assert scores["scale"] == "0-1" and scores["tokenizer"] == "ptb" and scores["num_images"] == 8
    stored = load_checkpoint(tiny_checkpoint).decoding["num_beams"]
    assert scores["decoding"]["num_beams"] == stored  # captioning/conf/eval.yaml's null: the checkpoint's own
    assert set(TOOLKIT) <= set(scores["scores"])
    assert "SPICE" in scores["scores"] or "SPICE" in scores["skipped"]
    assert all(0.0 <= scores["scores"][m] <= 1.0 for m in TOOLKIT if m != "CIDEr")
    # The same numbers as scoring the written results file afresh with the toolkit.
    hypotheses = {r["image_id"]: r["caption"] for r in results}
    fresh = score_captions(references, hypotheses, metrics=("Bleu_4", "CIDEr"), tokenizer="ptb")
    assert fresh == pytest.approx({m: scores["scores"][m] for m in ("Bleu_4", "CIDEr")}, abs=1e-12)
    assert scores["nltk_bleu"]["Bleu_1"] == pytest.approx(scores["scores"]["Bleu_1"], abs=1e-3)

    grounding = scores["grounding"]
    assert set(grounding) == {"grounding", "words", "unmatched", "attribute_grounding"}
    assert set(grounding["attribute_grounding"]) == {"size", "color", "shape"}
    assert grounding["words"] == 0 or 0.0 <= grounding["grounding"] <= 1.0
    assert f"num_beams={stored}" in printed and "0-1 scale" in printed and "SPICE" in printed
    assert "attention grounding" in printed and "NLTK corpus_bleu" in printed


def test_evaluate_checks_its_result_files_before_decoding(tiny_checkpoint, tmp_path, capsys):
    out = tmp_path / "ev"
    (out / "results.json").mkdir(parents=True)  # written with plain write_text, found after the decoding
    argv = ["evaluate", "--checkpoint", tiny_checkpoint, "--out-dir", str(out), "data.test.num_images=4"]
    assert main(argv) == 2
    assert capsys.readouterr() == (
        "",
        f"captioning evaluate: error: {out / 'results.json'}: is a folder; expected a file path for the "
        "results (COCO format)\n",
    )


def test_decoding_flags_are_the_hydra_overrides_and_disagreeing_ones_are_one_line(
    tiny_checkpoint, tmp_path, capsys
):
    def evaluate(name, *decoding):  # the flags before the overrides: argparse ends the overrides at a flag
        argv = ["evaluate", "--checkpoint", tiny_checkpoint, "--out-dir", str(tmp_path / name), *decoding]
        return main([*argv, "data.test.num_images=4", "tokenizer=simple"])

    assert evaluate("flags", "--num-beams", "2", "--length-penalty", "0.5") == 0
    assert evaluate("hydra", "decoding.num_beams=2", "decoding.length_penalty=0.5") == 0
    flags, hydra = (json.loads((tmp_path / d / "scores.json").read_text()) for d in ("flags", "hydra"))
    assert flags["decoding"] == hydra["decoding"] and flags["scores"] == hydra["scores"]
    assert (flags["decoding"]["num_beams"], flags["decoding"]["length_penalty"]) == (2, 0.5)
    capsys.readouterr()
    assert evaluate("both", "--num-beams", "3", "decoding.num_beams=2") == 2
    assert capsys.readouterr().err == (
        "captioning evaluate: error: --num-beams 3 and the override decoding.num_beams=2 disagree; give the "
        "decoding option once\n"
    )
    assert not (tmp_path / "both").exists()


@pytest.mark.parametrize("beam", [1, 3])
def test_evaluation_decodes_exactly_like_the_caption_command(tiny_checkpoint, beam):
    source = SyntheticSource(6, seed=0, split="test")
    evaluation = evaluate_checkpoint(
        tiny_checkpoint,
        source,
        decoding={"num_beams": beam},
        tokenizer="simple",
        metrics=("Bleu_4", "CIDEr"),
        batch_size=4,
    )
    model = load_checkpoint(tiny_checkpoint)
    images = [source.image(i) for i in range(6)]
    expected = Captioner(model).caption(images, num_beams=beam)
    assert evaluation.decoded.captions == [c.caption for c in expected]
    for attention, caption in zip(evaluation.decoded.attention, expected):
        np.testing.assert_allclose(attention, caption.attention.reshape(len(caption.tokens), -1), atol=1e-6)
    assert evaluation.decoding == {**model.decoding, "num_beams": beam}
    hypotheses = dict(zip(evaluation.decoded.image_ids, evaluation.decoded.captions))
    references = {i: list(source.captions(i)) for i in range(6)}
    assert evaluation.report.scores == pytest.approx(
        score_captions(references, hypotheses, ("Bleu_4", "CIDEr"))
    )
    net = model.net
    assert evaluation.params == {
        "total": sum(p.numel() for p in net.parameters()),
        "trainable": sum(p.numel() for p in net.parameters() if p.requires_grad),
    }


def test_grounding_counts_words_whose_attention_peak_is_on_the_named_object():
    source = SyntheticSource(1, seed=5, split="test")
    (obj, *_) = source.objects(0)
    words = [obj.size, obj.color, obj.shape]
    grid = (96, 96)  # one cell per pixel of the 96-px canvas: a peak cell's centre is that pixel + 0.5
    x0, y0, x1, y1 = obj.box
    cx, cy = int((x0 + x1) / 2), int((y0 + y1) / 2)
    far_x, far_y = (95 if cx < 48 else 0), (95 if cy < 48 else 0)  # the opposite corner: outside the box

    def decoded(peak_x: int, peak_y: int) -> SplitCaptions:
        attention = np.full((3, 96 * 96), 1e-5)
        attention[:, peak_y * 96 + peak_x] = 1.0  # row-major over the grid
        return SplitCaptions([0], [" ".join(words)], [words], [attention], grid, indices=[0])

    # one size, one colour and one shape word, all looking at the object or all looking away
    ones = {"size": 1.0, "color": 1.0, "shape": 1.0}
    assert synthetic_grounding(decoded(cx, cy), source) == {
        "grounding": 1.0,
        "words": 3,
        "unmatched": 0,
        "attribute_grounding": ones,
    }
    assert synthetic_grounding(decoded(far_x, far_y), source) == {
        "grounding": 0.0,
        "words": 3,
        "unmatched": 0,
        "attribute_grounding": {a: 0.0 for a in ones},
    }


def test_evaluate_cli_reports_errors_with_exit_status_2(tiny_checkpoint, tmp_path, capsys):
    fake = tmp_path / "model.ckpt"
    fake.write_bytes(b"\x00" * 64)
    assert main(["evaluate", "--checkpoint", str(fake), "--out-dir", str(tmp_path)]) == 2
    assert "not a readable checkpoint" in capsys.readouterr().err
    assert main(["evaluate", "--checkpoint", tiny_checkpoint, "split=bogus"]) == 2
    assert "split must be one of" in capsys.readouterr().err
    assert main(["evaluate", "--checkpoint", tiny_checkpoint, "split=dev"]) == 2  # Flickr8k's own name
    assert "got 'dev'; a dev split (Flickr8k's name) is split=val" in capsys.readouterr().err
    assert main(["evaluate", "--checkpoint", tiny_checkpoint, "data=nonexistent"]) == 2
    assert "nonexistent" in capsys.readouterr().err


def test_one_unreadable_image_is_skipped_and_reported_not_the_end_of_the_split(tmp_path):
    """`captioning evaluate` over a folder of photos with one broken file scores the others."""
    from captioning.data.images import ImageError
    from captioning.inference.evaluation import evaluate_checkpoint, format_evaluation

    from support.corpus import write_checkpoint

    class OneBroken(SyntheticSource):
        def image(self, i):
            if i == 2:
                raise ImageError(f"{tmp_path / 'broken.jpg'}: not a readable image (truncated)")
            return super().image(i)

    ckpt = write_checkpoint(tmp_path / "model.ckpt")
    evaluation = evaluate_checkpoint(ckpt, OneBroken(5, seed=0, split="test"), tokenizer="simple",
                                     metrics=("Bleu_1",), batch_size=2)  # fmt: skip
    assert evaluation.decoded.image_ids == [0, 1, 3, 4] and evaluation.report.num_images == 4
    assert evaluation.to_dict()["skipped_images"] == [
        f"{tmp_path / 'broken.jpg'}: not a readable image (truncated)"
    ]
    assert "skipped 1 unreadable images (not scored)" in format_evaluation(evaluation)


def test_with_the_feature_cache_one_unreadable_file_is_skipped_and_reported_too(tmp_path):
    """The cache encodes a whole split before the first batch: a truncated JPEG among photos on disk is
    found by the image check first, reported in one line, and the other photos are cached and scored."""
    from PIL import Image

    from captioning.data.records import ImageRecord
    from captioning.data.sources import RecordSource
    from captioning.inference.evaluation import evaluate_checkpoint

    from support.corpus import write_checkpoint

    records = []
    for i, colour in enumerate(["red", "blue", None, "green", "white"]):
        path = tmp_path / f"photo{i}.jpg"
        if colour is None:  # a JPEG cut short: a header and no image data
            Image.new("RGB", (32, 32), "black").save(path)
            path.write_bytes(path.read_bytes()[:40])
        else:
            Image.new("RGB", (32, 32), colour).save(path)
        records.append(ImageRecord(f"photo{i}", path, ("a red circle", "a square")))
    ckpt = write_checkpoint(tmp_path / "model.ckpt", extra=["model.encoder.freeze=true"])  # cached grids
    cache = tmp_path / "cache"
    evaluation = evaluate_checkpoint(ckpt, RecordSource(records), tokenizer="simple", metrics=("Bleu_1",),
                                     batch_size=2, cache_dir=cache)  # fmt: skip
    assert evaluation.decoded.image_ids == ["photo0", "photo1", "photo3", "photo4"]
    assert evaluation.report.num_images == 4
    [line] = evaluation.to_dict()["skipped_images"]
    assert line.startswith(f"{tmp_path / 'photo2.jpg'}: ")
    assert len([d for d in cache.iterdir() if d.is_dir()]) == 1  # the grids were read from the cache
    again = evaluate_checkpoint(ckpt, RecordSource(records), tokenizer="simple", metrics=("Bleu_1",),
                                batch_size=2, cache_dir=cache)  # fmt: skip
    assert again.decoded.captions == evaluation.decoded.captions


def test_evaluate_without_data_refuses_a_photo_model_instead_of_scoring_synthetic_scenes(tmp_path, capsys):
    from support.corpus import write_checkpoint

    photo_words = ["dog", "runs", "through", "grass", "man", "rides", "bike", "a"]
    # a checkpoint from before checkpoints recorded their data: its words are all the evidence there is
    checkpoint = write_checkpoint(tmp_path / "photos.ckpt", words=photo_words, recorded=False)
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--out-dir", str(tmp_path / "ev")]) == 2
    err = capsys.readouterr().err
    assert f"{checkpoint}: no data= given" in err and "data=flickr8k" in err and "data=synthetic" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "ev").exists()


def test_evaluate_without_data_scores_a_zoo_model_on_the_data_the_zoo_lists(tmp_path, capsys):
    """A zoo model records no data in its file, but the zoo says what it was trained on (``captioning
    models`` lists it): evaluate without data= used to refuse it; it now reads that data (here a missing
    Flickr8k copy, named with the key to set)."""
    zoo = Path(__file__).resolve().parents[2] / "docs" / "models" / "flickr8k_soft_scst.safetensors"
    missing = tmp_path / "no_flickr8k"
    assert (
        main(["evaluate", "--checkpoint", str(zoo), f"paths.flickr8k={missing}", "--out-dir", str(tmp_path)])
        == 2
    )
    assert_one_line(capsys.readouterr().err, f"{missing}: not found", "paths.flickr8k=PATH")


def test_a_synthetic_scene_model_scored_on_photos_gets_a_note(tmp_path, capsys):
    """evaluate --checkpoint synthetic-soft data=flickr8k scored photos with "a big yellow square ..."
    without a word; the scores now come with a note on stderr and in scores.json."""
    from support.corpus import write_checkpoint
    from support.tiny_datasets import flickr8k_copy

    scene_words = ["a", "big", "red", "circle", "square", "in", "the", "top", "left"]  # nothing but these
    checkpoint = write_checkpoint(tmp_path / "scenes.ckpt", words=scene_words)
    argv = ["evaluate", "--checkpoint", str(checkpoint), "data=flickr8k", f"paths.flickr8k={flickr8k_copy(tmp_path)}",
            "split=val", "tokenizer=simple", "feature_cache=false", "--out-dir", str(tmp_path / "ev")]  # fmt: skip
    assert main(argv) == 0
    note = f"{checkpoint}: trained on synthetic scenes"
    assert f"captioning evaluate: note: {note}" in capsys.readouterr().err
    [line] = json.loads((tmp_path / "ev" / "scores.json").read_text())["notes"]
    assert line.startswith(note) and line.endswith("scored on flickr8k/val")
    argv = [
        *argv[:3],
        "data=synthetic",
        "data.test.num_images=2",
        "tokenizer=simple",
        "--out-dir",
        str(tmp_path / "e2"),
    ]
    assert main(argv) == 0
    assert "note:" not in capsys.readouterr().err  # on its own data: nothing to say


def test_evaluate_without_data_uses_the_data_the_checkpoint_records(tmp_path, capsys):
    import torch

    from support.corpus import build_module, checkpoint_dict

    checkpoint = checkpoint_dict(build_module(["dog", "runs"]))
    checkpoint["captioning"]["provenance"]["data"] = "mystery_corpus"
    torch.save(checkpoint, tmp_path / "m.ckpt")
    assert main(["evaluate", "--checkpoint", str(tmp_path / "m.ckpt")]) == 2
    assert "was trained on data 'mystery_corpus', which is not a data config here" in capsys.readouterr().err


def test_a_synthetic_vocabulary_is_recognised_and_a_photo_one_is_not():
    from captioning.inference.evaluation import trained_data

    scenes = ["<pad>", "<start>", "<end>", "<unk>", "a", "big", "red", "circle", "in", "the", "top", "left"]
    assert trained_data({"vocab": {"itos": scenes}}) == "synthetic"
    assert trained_data({"vocab": {"itos": [*scenes[:4], "a", "dog", "on", "the", "grass", "runs"]}}) is None
    assert trained_data({"vocab": {"itos": scenes}, "provenance": {"data": "flickr8k"}}) == "flickr8k"


def test_evaluate_samples_with_a_seed_recorded_in_the_scores(tmp_path, capsys):
    from support.corpus import write_checkpoint

    checkpoint = str(write_checkpoint(tmp_path / "m.ckpt"))
    captions = {}
    for run, seed in (("a", []), ("b", []), ("c", ["--seed", "5"])):
        argv = ["evaluate", "--checkpoint", checkpoint, "--out-dir", str(tmp_path / run), *seed,
                "data.test.num_images=6", "decoding.do_sample=true", "decoding.temperature=3.0", "tokenizer=simple"]  # fmt: skip
        assert main(argv) == 0
        captions[run] = [r["caption"] for r in json.loads((tmp_path / run / "results.json").read_text())]
        scores = json.loads((tmp_path / run / "scores.json").read_text())
        assert scores["seed"] == (5 if seed else 0) and scores["decoding"]["do_sample"] is True
    assert captions["a"] == captions["b"] and captions["a"] != captions["c"]


def test_evaluate_refuses_hard_attention_for_a_soft_model_and_sampling_with_rerank(tmp_path, capsys):
    from support.corpus import write_checkpoint

    checkpoint = str(write_checkpoint(tmp_path / "m.ckpt"))
    assert main(["evaluate", "--checkpoint", checkpoint, "decoding.hard_attention=expected"]) == 2
    assert "this model's attention is soft" in capsys.readouterr().err
    assert main(["evaluate", "--checkpoint", checkpoint, "rerank=consensus", "decoding.do_sample=true"]) == 2
    assert "decoding: do_sample with reranking" in capsys.readouterr().err


def test_synthetic_recognition_needs_every_word_a_scene_word():
    from captioning.inference.evaluation import trained_data

    specials = ["<pad>", "<start>", "<end>", "<unk>"]
    assert trained_data({"vocab": {"itos": [*specials, "a", "red", "circle"]}}) == "synthetic"
    # a model of the user's own shapes and colours: one word that no scene caption has, and it is not scenes
    assert trained_data({"vocab": {"itos": [*specials, "a", "red", "circle", "of"]}}) is None


def test_asking_for_more_images_than_the_split_has_is_said(tmp_path, capsys):
    """data.val.num_images=500 on a 1-image dev list scored the one image without a word."""
    from support.corpus import write_checkpoint
    from support.tiny_datasets import flickr8k_copy

    checkpoint = write_checkpoint(tmp_path / "m.ckpt", words=["a", "dog", "man", "in", "the", "snow"])
    argv = ["evaluate", "--checkpoint", str(checkpoint), "data=flickr8k", f"paths.flickr8k={flickr8k_copy(tmp_path)}",
            "split=val", "tokenizer=simple", "feature_cache=false"]  # fmt: skip
    out = ["--out-dir", str(tmp_path / "ev")]
    assert main([*argv, "data.val.num_images=500", *out]) == 0
    note = "data.val.num_images=500: the split has 1 image; 1 was decoded"
    assert f"captioning evaluate: note: {note}" in capsys.readouterr().err
    assert json.loads((tmp_path / "ev" / "scores.json").read_text())["notes"] == [note]
    assert main([*argv, "data.val.num_images=1", *out]) == 0  # as many as there are: nothing to say
    assert "note:" not in capsys.readouterr().err
