"""`captioning evaluate` and `captioning tune`: their configs, outputs and weights are checked first."""

from __future__ import annotations

import errno
import os
import re

import pytest

from captioning.cli.main import main as captioning_main

from support.hostile import (
    assert_one_line,
    exported,
    mutated,
    set_first,
)


@pytest.mark.parametrize("kind", ["under-a-file", "read-only"])
def test_an_unwritable_out_dir_is_refused_before_any_work(
    good_checkpoint, tmp_path, capsys, monkeypatch, kind
):
    if kind == "under-a-file":
        (tmp_path / "file").write_text("")
        out_dir, fragment = tmp_path / "file" / "x", "cannot create its folder"
    else:  # a read-only folder (os.access as a read-only mount answers it: root may write anywhere else)
        out_dir, fragment = tmp_path / "ro", "is not writable"
        out_dir.mkdir()
        real_access = os.access
        monkeypatch.setattr(
            os, "access", lambda p, mode: False if str(p) == str(out_dir) else real_access(p, mode)
        )
    import captioning.inference.evaluation as evaluation

    monkeypatch.setattr(evaluation, "decode_source", lambda *a, **k: pytest.fail("decoded before the check"))
    argv = ["evaluate", "--checkpoint", str(good_checkpoint), "--out-dir", str(out_dir), "data=synthetic",
            "data.test.num_images=4", "tokenizer=simple", "decoding.num_beams=1"]  # fmt: skip
    assert captioning_main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert_one_line(err, str(out_dir), fragment)


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("feature_cache=maybe", "feature_cache='maybe': expected a boolean"),
        ("+bogus=1", "bogus: unknown top-level key(s)"),
        ("data.test.seed=abc", "data.test.seed='abc': expected an integer"),
        ("batch_size=0", "batch_size=0: expected an integer >= 1"),
        ("device=mps", "device=mps: Apple's MPS is not available"),
        # Hydra's own advice was "use +data.test.num_image=2": a key that nothing reads
        (
            "data.test.num_image=2",
            "data.test.num_image: no such config key; did you mean data.test.num_images?",
        ),
        ("decoding.num_beam=2", "decoding.num_beam: no such config key; did you mean decoding.num_beams?"),
        ("zzz=1", "zzz: no such config key; see captioning/conf/eval.yaml for the keys"),
    ],
    ids=["bool", "unknown-key", "data-type", "batch-size", "device", "typo", "decoding-typo", "no-such-key"],
)
def test_evaluate_checks_its_config_like_training_does(
    override, fragment, good_checkpoint, tmp_path, capsys
) -> None:
    argv = ["evaluate", "--checkpoint", str(good_checkpoint), "--out-dir", str(tmp_path / "ev")]
    assert captioning_main([*argv, "data.test.num_images=2", override]) == 2
    assert_one_line(capsys.readouterr().err, fragment)
    assert not (tmp_path / "ev").exists()


def test_tune_checks_its_outputs_and_split_before_the_grid(good_checkpoint, tmp_path, capsys) -> None:
    grid = ["--num-beams", "1", "--length-penalty", "0", "--no-repeat-ngram-size", "0"]
    base = ["tune", "--checkpoint", str(good_checkpoint)]
    assert captioning_main([*base, "--out", str(tmp_path), "data.val.num_images=4", *grid]) == 2
    assert_one_line(capsys.readouterr().err, f"--out {tmp_path}: is a folder")
    assert captioning_main([*base, "data.val.num_images=1", *grid]) == 2
    assert_one_line(capsys.readouterr().err, "the val split has 1 image(s); tuning needs at least 2")


def test_storing_tuned_defaults_where_the_file_cannot_be_replaced_leaves_nothing_behind(
    good_checkpoint, tmp_path, monkeypatch
) -> None:
    from captioning.checkpoints import defaults

    export = exported(good_checkpoint, tmp_path / "e.safetensors")
    before = export.read_bytes()

    def refuse(src, dst):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "replace", refuse)  # where the export module replaces the file
    with pytest.raises(OSError, match=re.escape(f"{export}: cannot store the decoding defaults there")):
        defaults.write_decoding_defaults(export, {"num_beams": 2})
    assert export.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["e.safetensors"]


def test_evaluate_and_tune_never_score_overflowing_weights(good_checkpoint, tmp_path, capsys) -> None:
    huge = mutated(
        good_checkpoint, tmp_path / "huge.ckpt", set_first("out.weight", lambda t: t.sign() * 3e38)
    )
    assert captioning_main(["evaluate", "--checkpoint", str(huge), "--out-dir", str(tmp_path / "ev"),
                            "data.test.num_images=2"]) == 2  # fmt: skip
    assert_one_line(capsys.readouterr().err, "scores are not finite (NaN/inf)")
    assert not (tmp_path / "ev").exists()
    grid = ["--num-beams", "1", "--length-penalty", "0", "--no-repeat-ngram-size", "0", "--write"]
    before = huge.read_bytes()
    assert captioning_main(["tune", "--checkpoint", str(huge), "data.val.num_images=2", *grid]) == 2
    assert_one_line(capsys.readouterr().err, str(huge), "scores are not finite (NaN/inf)")
    assert huge.read_bytes() == before  # nothing "best" was stored


def test_evaluate_names_a_negative_scene_seed(good_checkpoint, tmp_path, capsys) -> None:
    argv = ["evaluate", "--checkpoint", str(good_checkpoint), "--out-dir", str(tmp_path / "ev")]
    assert captioning_main([*argv, "data.test.num_images=2", "data.test.seed=-1"]) == 2
    assert_one_line(capsys.readouterr().err, "data.test.seed=-1: expected an integer >= 0")  # its config key


def test_evaluate_refuses_an_out_dir_that_is_a_file_before_decoding(
    good_checkpoint, tmp_path, capsys
) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    argv = [
        "evaluate",
        "--checkpoint",
        str(good_checkpoint),
        "--out-dir",
        str(target),
        "data.test.num_images=2",
    ]
    assert captioning_main(argv) == 2
    assert_one_line(capsys.readouterr().err, f"--out-dir {target}: is a file")


def test_the_default_out_dir_is_one_per_checkpoint_and_setting(tmp_path) -> None:
    # Two runs' last.ckpt, one checkpoint at two settings, or the same split of two copies of a dataset (or
    # of fewer of its images) never share the default folder (one would replace the other's results, as
    # data.test.num_images=4 did a whole split's); the same evaluation again writes where it wrote before.
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from captioning.cli.evaluate import default_out_dir

    def folder(
        run: str,
        seed: int = 0,
        root: str = "/data/f8k",
        images: int | None = None,
        workers: int = 2,
        **decoding,
    ) -> str:
        evaluation = SimpleNamespace(decoding={"num_beams": 3, **decoding}, rerank=None, seed=seed)
        cfg = OmegaConf.create(
            {"paths": {"flickr8k": root}, "split": "test", "tokenizer": "ptb",
             "data": {"test": {"root": "${paths.flickr8k}", "num_images": images}, "num_workers": workers,
                      "train": {"root": "${oc.env:NO_SUCH_VARIABLE_SET}"}}}  # another split's: never resolved
        )  # fmt: skip
        return str(default_out_dir([tmp_path / run / "last.ckpt"], "flickr8k", cfg, evaluation))

    a = folder("runA")
    assert re.fullmatch(r"outputs/evaluate/last/flickr8k-test-beam3-[0-9a-f]{8}", a)
    others = [
        folder("runB"), folder("runA", length_penalty=0.5), folder("runA", seed=1),
        folder("runA", root="/data/f8k_full"), folder("runA", images=4),
    ]  # fmt: skip
    assert len(set(others)) == len(others) and a not in others
    assert folder("runA") == a == folder("runA", workers=0)  # how it runs is not what it measures


def test_evaluate_on_device_auto_runs_where_auto_resolves(good_checkpoint, tmp_path, capsys) -> None:
    # device=auto passed the check and then reached torch as "auto": the resolved device is the one used.
    argv = ["evaluate", "--checkpoint", str(good_checkpoint), "--out-dir", str(tmp_path / "ev")]
    assert captioning_main([*argv, "data.test.num_images=2", "tokenizer=simple", "device=auto"]) == 0
    assert (tmp_path / "ev" / "scores.json").is_file()
