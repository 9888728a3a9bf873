"""COCO caption metrics: the official coco-caption demo reproduced, and the wrappers' contracts."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import shutil
from pathlib import Path

import pytest
from pycocoevalcap.spice import get_stanford_models as spice_models

from captioning.cli.score import add_parser, run
from captioning.data.tokenize import tokenize
from captioning.metrics import coco
from captioning.metrics.coco import (
    METRICS,
    evaluate_results,
    load_coco_references,
    load_results,
    score_captions,
    tokenize_captions,
)

DEMO = Path(__file__).resolve().parents[3] / "shared" / "data" / "coco_caption_eval"
needs_demo = pytest.mark.skipif(not DEMO.is_dir(), reason=f"coco-caption demo data not at {DEMO}")
needs_java = pytest.mark.skipif(shutil.which("java") is None, reason="`java` is not on PATH")

# cocoEvalCapDemo.ipynb as printed, and the README's 6-digit values from the toolkit's own scorers.
DEMO_3DP = {"Bleu_1": 0.579, "Bleu_2": 0.404, "Bleu_3": 0.279, "Bleu_4": 0.191}
DEMO_3DP |= {"METEOR": 0.195, "ROUGE_L": 0.396, "CIDEr": 0.600}
DEMO_6DP = {"Bleu_1": 0.579400, "Bleu_2": 0.404391, "Bleu_3": 0.278536, "Bleu_4": 0.190829}
DEMO_6DP |= {"ROUGE_L": 0.396253, "CIDEr": 0.599791}


def _java_children() -> list[int]:
    """Pids of java processes whose parent is this test process (Linux /proc)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            name, rest = stat.read_text().split(") ", 1)
            if name.endswith("(java") and int(rest.split()[1]) == os.getpid():
                pids.append(int(stat.parent.name))
    return pids


@pytest.fixture(scope="module")
def cli_demo(tmp_path_factory):
    """`captioning score RESULTS --references ANNOTATIONS --out ...` on the demo, with CLI defaults (ptb)."""
    if not DEMO.is_dir() or shutil.which("java") is None:
        pytest.skip("needs the demo data and java")
    parser = argparse.ArgumentParser(prog="captioning")
    add_parser(parser.add_subparsers(dest="command"))
    out = tmp_path_factory.mktemp("score") / "scores.json"
    argv = ["score", str(DEMO / "captions_val2014_fakecap_results.json")]
    argv += ["--references", str(DEMO / "captions_val2014_fakecap1000_subset.json"), "--out", str(out)]
    args = parser.parse_args(argv)
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        rc = run(args)
    return rc, json.loads(out.read_text()), stdout.getvalue()


@needs_demo
@needs_java
def test_cli_default_path_reproduces_the_official_demo(cli_demo):
    rc, payload, stdout = cli_demo
    assert rc == 0 and payload["tokenizer"] == "ptb" and payload["num_images"] == 1000
    assert {m: round(payload["scores"][m], 3) for m in DEMO_3DP} == DEMO_3DP
    for name, value in DEMO_6DP.items():  # the PTB path gives the toolkit's numbers to every digit printed
        assert payload["scores"][name] == pytest.approx(value, abs=1e-6), name
    # SPICE is either computed (CoreNLP installed: demo prints 0.133) or skipped with a reason.
    assert round(payload["scores"].get("SPICE", 0.133), 3) == 0.133
    assert ("SPICE" in payload["scores"]) != ("SPICE" in payload["skipped"])
    assert (
        "0-1 scale" in stdout
        and "NLTK" in stdout
        and f"METEOR      {payload['scores']['METEOR']:.4f}" in stdout
    )
    assert _java_children() == []  # METEOR's java process was ended


@needs_demo
def test_pretokenised_demo_matches_readme_to_six_digits():
    refs = json.loads((DEMO / "references_ptbtokenized.json").read_text())
    hyps = {k: v[0] for k, v in json.loads((DEMO / "results_ptbtokenized.json").read_text()).items()}
    scores = score_captions(refs, hyps, metrics=list(DEMO_6DP), tokenizer="none")
    assert list(scores) == list(DEMO_6DP)
    for name, value in DEMO_6DP.items():
        assert scores[name] == pytest.approx(value, abs=1e-6), name


@needs_demo
def test_nltk_cross_check_agrees_with_toolkit_bleu_on_demo():
    # Same brevity penalty (closest reference length, ties to the shorter) and clipped precisions; the
    # toolkit only adds 1e-15 / 1e-9 to each precision's numerator / denominator, hence 1e-9.
    refs = json.loads((DEMO / "references_ptbtokenized.json").read_text())
    results = [
        {"image_id": k, "caption": v[0]}
        for k, v in json.loads((DEMO / "results_ptbtokenized.json").read_text()).items()
    ]
    report = evaluate_results(results, refs, metrics=METRICS[:4], tokenizer="none")
    assert report.num_images == 1000 and report.skipped == {}
    for name in METRICS[:4]:
        assert report.nltk_bleu[name] == pytest.approx(report.scores[name], abs=1e-9), name


@needs_demo
@needs_java
def test_ptb_tokenizer_reproduces_the_toolkit_tokenised_references():
    refs = load_coco_references(DEMO / "captions_val2014_fakecap1000_subset.json")
    expected = json.loads((DEMO / "references_ptbtokenized.json").read_text())
    assert {str(k): v for k, v in tokenize_captions(refs, "ptb").items()} == expected


@needs_demo
def test_demo_results_round_trip_through_loadres():
    refs = load_coco_references(DEMO / "captions_val2014_fakecap1000_subset.json")
    assert len(refs) == 1000 and sum(map(len, refs.values())) == 5005
    path = DEMO / "captions_val2014_fakecap_results.json"
    assert load_results(path, refs) == json.loads(path.read_text())


def _write_coco(tmp_path: Path, refs: dict[int, list[str]]) -> Path:
    anns = [{"image_id": i, "caption": c} for i, caps in refs.items() for c in caps]
    data = {"images": [{"id": i} for i in refs], "annotations": [{**a, "id": n} for n, a in enumerate(anns)]}
    path = tmp_path / "captions.json"
    path.write_text(json.dumps(data))
    return path


REFS = {
    1: ["A big red circle.", "a red circle", "big red round shape", "the circle is red", "one red circle"],
    2: [
        "A small blue square",
        "blue square",
        "a small square that is blue",
        "tiny blue box",
        "blue square shape",
    ],
}


def test_results_round_trip_and_unknown_ids_name_the_file(tmp_path):
    refs = load_coco_references(_write_coco(tmp_path, REFS))
    assert refs == REFS
    results = [{"image_id": 2, "caption": "a blue square"}, {"image_id": 1, "caption": "a red circle"}]
    good = tmp_path / "results.json"
    good.write_text(json.dumps(results))
    assert load_results(good, refs) == results
    bad = tmp_path / "bad_results.json"
    bad.write_text(json.dumps([*results, {"image_id": 99, "caption": "x"}]))
    with pytest.raises(
        ValueError, match=r"bad_results\.json: 1 image ids are not in the references, e\.g\. \[99\]"
    ):
        load_results(bad, refs)
    bad.write_text(json.dumps([{"caption": "no id"}]))
    with pytest.raises(ValueError, match=r"bad_results\.json: expected a non-empty list"):
        load_results(bad, refs)


def test_perfect_results_file_scores_bleu_one(tmp_path):
    # Hypothesis = reference 1 of 5: every n-gram is matched and the closest reference length is its own,
    # so there is no brevity penalty. BLEU is 1 up to the toolkit's (n + 1e-15) / (n + 1e-9) precision
    # guards (1 - 1e-10 here), ROUGE-L is exactly 1 (best precision and recall over references are 1).
    refs = load_coco_references(_write_coco(tmp_path, REFS))
    results_path = tmp_path / "perfect.json"
    results_path.write_text(json.dumps([{"image_id": i, "caption": caps[0]} for i, caps in REFS.items()]))
    report = evaluate_results(
        load_results(results_path, refs), refs, metrics=METRICS[:4] + ("ROUGE_L",), tokenizer="simple"
    )
    for name in METRICS[:4]:
        assert report.scores[name] == pytest.approx(1.0, abs=1e-9), name
        assert report.nltk_bleu[name] == 1.0, name  # NLTK has no guards
    assert report.scores["ROUGE_L"] == 1.0


def test_key_mismatch_and_bad_arguments_are_clear_errors():
    with pytest.raises(
        ValueError,
        match=r"1 hypothesis ids have no references \(e\.g\. \[3\]\), 1 reference ids have no hypothesis \(e\.g\. \[2\]\)",
    ):
        score_captions(REFS, {1: "a red circle", 3: "a blue square"})
    with pytest.raises(ValueError, match=r"unknown metrics \['BLEU'\]"):
        score_captions(REFS, {1: "a", 2: "b"}, metrics=["BLEU"])
    with pytest.raises(ValueError, match=r"tokenizer must be one of \('ptb', 'simple', 'none'\), got 'nltk'"):
        score_captions(REFS, {1: "a", 2: "b"}, tokenizer="nltk")
    with pytest.raises(ValueError, match="image 1 has several captions"):
        evaluate_results([{"image_id": 1, "caption": "a"}, {"image_id": 1, "caption": "b"}], REFS)


def test_spice_is_skipped_with_a_reason_and_never_downloads(monkeypatch, tmp_path):
    def no_network(*args, **kwargs):
        raise AssertionError("pycocoevalcap tried to download Stanford CoreNLP")

    monkeypatch.setattr(spice_models, "urlretrieve", no_network)
    monkeypatch.setattr(spice_models, "SPICEDIR", str(tmp_path))  # a place without the CoreNLP jars
    hyps = {1: "a red circle", 2: "a blue square"}
    report = evaluate_results(
        [{"image_id": k, "caption": v} for k, v in hyps.items()],
        REFS,
        metrics=("Bleu_1", "SPICE"),
        tokenizer="simple",
    )
    assert list(report.scores) == ["Bleu_1"]
    assert (
        "stanford-corenlp-3.6.0-models.jar" in report.skipped["SPICE"]
        and str(tmp_path) in report.skipped["SPICE"]
    )
    with pytest.warns(RuntimeWarning, match="SPICE skipped: Stanford CoreNLP jars"):
        assert list(score_captions(REFS, hyps, metrics=["SPICE", "Bleu_4"])) == ["Bleu_4"]


def test_without_java_meteor_is_skipped_and_ptb_refuses(monkeypatch):
    monkeypatch.setattr(coco.shutil, "which", lambda name: None)
    hyps = {1: "a red circle", 2: "a blue square"}
    with pytest.warns(RuntimeWarning, match="METEOR skipped: `java` is not on PATH"):
        assert list(score_captions(REFS, hyps, metrics=["METEOR", "CIDEr"])) == ["CIDEr"]
    with pytest.raises(RuntimeError, match="tokenizer='ptb' needs Java"):
        score_captions(REFS, hyps, tokenizer="ptb")


@needs_java
def test_meteor_java_process_is_ended_even_with_its_lock_held():
    meteor = coco._ClosingMeteor()
    proc = meteor.meteor_p
    meteor.lock.acquire()  # as after a compute_score that raised: pycocoevalcap's __del__ would block here
    meteor.__del__()
    assert proc.returncode is not None and proc.stdout.closed and proc.stderr.closed


def test_simple_validation_path_scores_without_java(monkeypatch):
    """The LightningModule calls this every validation epoch: 200 images x 5 references. The simple
    tokenizer and these two metrics never start Java (its speed is a bench row, not a timed test)."""
    import subprocess

    def no_java(*args, **kwargs):
        raise AssertionError(f"Java started: {args}")

    monkeypatch.setattr(subprocess, "Popen", no_java)
    rng = random.Random(0)
    words = tokenize(
        "a big small red green blue yellow circle square triangle in the top bottom left right center and"
    )
    refs = {i: [" ".join(rng.choices(words, k=12)) for _ in range(5)] for i in range(200)}
    hyps = {i: " ".join(rng.choices(words, k=12)) for i in range(200)}
    scores = score_captions(refs, hyps, metrics=("Bleu_4", "CIDEr"), tokenizer="simple")
    assert list(scores) == ["Bleu_4", "CIDEr"] and 0 < scores["Bleu_4"] < 1 and scores["CIDEr"] > 0
    same = score_captions(refs, {i: refs[i][0] for i in refs}, metrics=("Bleu_4",), tokenizer="simple")
    assert same["Bleu_4"] == pytest.approx(1.0)  # a caption equal to a reference scores 1


def test_empty_generated_captions_score_zero_instead_of_crashing():
    # An untrained decoder often emits <end> first; validation must still get numbers.
    scores = score_captions(REFS, {1: "", 2: ""}, metrics=("Bleu_4", "ROUGE_L", "CIDEr"))
    assert scores == {"Bleu_4": 0.0, "ROUGE_L": 0.0, "CIDEr": 0.0}


def test_cli_reports_a_missing_results_file_with_exit_status_2(tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="captioning")
    add_parser(parser.add_subparsers(dest="command"))
    missing = tmp_path / "missing.json"
    args = parser.parse_args(["score", str(missing), "--references", str(_write_coco(tmp_path, REFS))])
    assert (args.tokenizer, args.metrics, args.out) == ("ptb", list(METRICS), None)  # the CLI defaults
    assert run(args) == 2
    assert capsys.readouterr().err == f"captioning score: error: results file {missing} does not exist\n"


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ({"image_id": 1, "caption": "a dog"}, "the top level is a JSON dict; expected a list"),
        ([{"image_id": [1], "caption": "a dog"}], "expected a non-empty list of {image_id, caption: str}"),
        ([{"image_id": None, "caption": "a dog"}], "expected a non-empty list of {image_id, caption: str}"),
    ],
)
def test_malformed_results_files_name_the_file_and_what_was_expected(tmp_path, content, fragment):
    results = tmp_path / "results.json"
    results.write_text(json.dumps(content))
    with pytest.raises(ValueError) as info:
        load_results(results, {1: ["a dog"]})
    assert str(results) in str(info.value) and fragment in str(info.value)


def test_an_unwritable_out_is_reported_after_the_scores(tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="captioning")
    add_parser(parser.add_subparsers(dest="command"))
    results = tmp_path / "results.json"
    results.write_text(json.dumps([{"image_id": k, "caption": REFS[k][0]} for k in REFS]))
    blocked = tmp_path / "file"
    blocked.write_text("a file, so file/scores.json cannot be created")
    argv = ["score", str(results), "--references", str(_write_coco(tmp_path, REFS)), "--tokenizer", "simple",
            "--metrics", "Bleu_1", "--out", str(blocked / "scores.json")]  # fmt: skip
    assert run(parser.parse_args(argv)) == 1
    out, err = capsys.readouterr()
    assert "Bleu_1" in out and f"{blocked / 'scores.json'}: cannot write the scores" in err
