"""`captioning score` and the PTB tokenizer on hostile references and results."""

from __future__ import annotations

import json

import pytest

from captioning.cli.main import main as captioning_main

from support.hostile import (
    assert_one_line,
)


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
