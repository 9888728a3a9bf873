"""Bad training configs give one clear line, before any training time is spent."""

from __future__ import annotations

import sys

import pytest
import pytorch_lightning as pl
from hydra.errors import ConfigCompositionException, MissingConfigException

from captioning.cli.main import main as captioning_main
from captioning.data.sources import SyntheticSource
from captioning.training.train import train

from support import TINY, compose_train
from support.hostile import (
    assert_one_line,
    run_train,
)

ROUND2_TRAIN = {
    "seed_range": (["seed=-1"], "seed=-1"),
    "image_size": (["data.image_size=0"], "data.image_size=0"),
    "workers": (["data.num_workers=-1"], "data.num_workers=-1"),
    "weight_decay": (["model.optimizer.weight_decay=-1"], "model.optimizer.weight_decay=-1"),
    "val_interval": (["trainer.val_check_interval=0"], "trainer.val_check_interval=0"),
    "no_images": (["data.train.num_images=0"], "data.train.num_images=0"),
    "scst_without_init": (["objective=scst"], "objective=scst starts from a cross-entropy checkpoint"),
    "precision": (["trainer.precision=bogus"], "trainer: Precision 'bogus' is invalid"),
    "ddp_value_head": (
        ["trainer=ddp", "model/decoder/attention=hard_reinforce", "model.decoder.attention.baseline=learned"],
        "model.decoder.attention.baseline=learned trains a value head",
    ),
}


@pytest.fixture
def no_data_no_training(monkeypatch):
    """Make reading data or starting to train an immediate test failure."""

    def refuse(*args, **kwargs):
        raise AssertionError("data were read or training started before the config was checked")

    monkeypatch.setattr(SyntheticSource, "__init__", refuse)
    monkeypatch.setattr(pl.Trainer, "fit", refuse)


@pytest.mark.parametrize("case", sorted(ROUND2_TRAIN))
def test_more_bad_training_configs_are_one_line(case, tmp_path, monkeypatch, capsys) -> None:
    argv, culprit = ROUND2_TRAIN[case]
    assert run_train(argv, tmp_path / "run", monkeypatch) == 2
    assert_one_line(capsys.readouterr().err, "captioning-train: error:", culprit)


@pytest.mark.parametrize(
    "override,fragment",
    [
        ("foo=1", "foo: no such config key"),
        ("trainer.max_epoch=1", "trainer.max_epoch: no such config key; did you mean trainer.max_epochs?"),
        ("modle.decoder.alpha_c=1", "did you mean model.decoder.alpha_c?"),
        (
            "model/decoder=bogus",
            "model/decoder=bogus: no such option (options: hard_gumbel, hard_reinforce, soft",
        ),
        (
            "model/decoder=sofft",
            "model/decoder=sofft: no such option; did you mean model/decoder=soft? (options:",
        ),
    ],
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
    line = assert_one_line(capsys.readouterr().err, "captioning-train: error:", fragment)
    assert "Config search path" not in line


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
    assert_one_line(capsys.readouterr().err, "cannot create the run folder")


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("data.train.split=bogus", "data.train: split must be one of ['test', 'train', 'val'], got 'bogus'"),
        ("model.decoder.attention=null", "model.decoder.attention=null: expected AttentionLayer | Callable"),
    ],
    ids=["split", "attention-null"],
)
def test_a_data_source_refusing_its_split_and_a_null_layer_are_one_line(
    override, fragment, tmp_path, monkeypatch, capsys
) -> None:
    assert run_train([override, "trainer.max_steps=3"], tmp_path / "run", monkeypatch) == 2
    assert_one_line(capsys.readouterr().err, fragment)
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("model.val_metrics=CIDEr", "model.val_metrics='CIDEr': expected a non-empty list of"),
        ("run_test=yes", "run_test='yes': expected a boolean"),
        ("run_test=no", "run_test='no': expected a boolean"),
        (
            "trainer.val_check_interval=1000",
            "trainer: `val_check_interval` (1000) must be less than or equal",
        ),
    ],
    ids=["metrics-string", "run-test-yes", "run-test-no", "val-interval-past-the-epoch"],
)
def test_more_training_settings_are_one_line(override, fragment, tmp_path, monkeypatch, capsys) -> None:
    assert run_train([override, "trainer.max_steps=3"], tmp_path / "run", monkeypatch) == 2
    assert_one_line(capsys.readouterr().err, fragment)


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("trainer.limit_train_batches=0", "trainer.limit_train_batches=0: expected an integer >= 1"),
        (
            "callbacks.model_checkpoint.dirpath=/proc/x",
            "callbacks.model_checkpoint.dirpath='/proc/x': cannot create",
        ),
        (  # init_from is allowed beside ckpt_path (resuming ignores it), the file must exist
            "init_from=a.ckpt ckpt_path=b.ckpt",
            "ckpt_path=b.ckpt: no such checkpoint file",
        ),
    ],
    ids=["no-batches", "checkpoint-folder", "init-and-resume"],
)
def test_training_settings_that_would_train_nothing_or_save_nowhere(
    override, fragment, tmp_path, monkeypatch, capsys
) -> None:
    assert run_train([*override.split(), "trainer.max_steps=3"], tmp_path / "run", monkeypatch) == 2
    assert_one_line(capsys.readouterr().err, fragment)


@pytest.mark.parametrize("quote", ['"', "'"])
def test_a_quoted_run_folder_is_the_folder_hydra_reads(tmp_path, monkeypatch, quote):
    """Lightning's DDP launcher starts the other processes with ``hydra.run.dir="<dir>"``: the folder made
    before Hydra starts is the unquoted one, not a folder named ``"`` in the current one."""
    from captioning.training.train import run_dir_value

    monkeypatch.chdir(tmp_path)
    assert run_dir_value(f"hydra.run.dir={quote}{tmp_path}/a b{quote}") == f"{tmp_path}/a b"
    assert run_dir_value("hydra.run.dir=outputs/${now:%H}") == "outputs/${now:%H}"  # left to Hydra
    assert run_dir_value("hydra.run.dir=plain/run") == "plain/run"
    for not_one in ("a,b", "[a,b]", "null"):  # a sweep, a list, null: Hydra's to report, no folder made here
        assert run_dir_value(f"hydra.run.dir={not_one}") is None


def test_an_empty_run_folder_and_empty_output_paths_are_refused(
    good_checkpoint, tmp_path, monkeypatch, capsys
):
    from captioning.training.train import cli

    monkeypatch.setattr(sys, "argv", ["captioning-train", "debug=tiny", "hydra.run.dir="])
    with pytest.raises(SystemExit) as info:
        cli()
    assert info.value.code == 2
    assert_one_line(capsys.readouterr().err, "hydra.run.dir='': expected a folder path")
    for argv in (
        ["evaluate", "--checkpoint", str(good_checkpoint), "--out-dir", ""],
        ["score", str(tmp_path / "r.json"), "--references", str(tmp_path / "f.json"), "--out", ""],
        ["plot", str(tmp_path), "--out", ""],
    ):
        with pytest.raises(SystemExit) as info:
            captioning_main(argv)
        assert info.value.code == 2 and "an empty string is not a file path" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("override", "fragments"),
    [
        ("model.decoder.feature_dim=32", ("encoder gives 16-dim features", "feature_dim=32")),
        ("model.decoding.num_beams=0", ("model.decoding", "num_beams=0: expected an integer in [1, 64]")),
    ],
)
def test_bad_model_config_fails_at_start_up(override, fragments, tmp_path, no_data_no_training) -> None:
    cfg = compose_train([*TINY, override], tmp_path)
    with pytest.raises(Exception) as info:
        train(cfg)
    assert not isinstance(info.value, AssertionError), info.value
    for fragment in fragments:
        assert fragment in str(info.value)
    assert not (tmp_path / "checkpoints").exists()


def test_unknown_decoder_lists_the_available_ones() -> None:
    with pytest.raises(MissingConfigException) as info:
        compose_train([*TINY, "model/decoder=lstmm"])
    message = str(info.value)
    assert (
        "Could not find 'model/decoder/lstmm'" in message and "soft" in message and "transformer" in message
    )


def test_unknown_decoder_option_is_refused() -> None:
    with pytest.raises(ConfigCompositionException) as info:
        compose_train([*TINY, "model.decoder.hiden_dim=8"])
    assert "model.decoder.hiden_dim" in str(info.value)
    assert "Key 'hiden_dim' is not in struct" in str(info.value.__cause__)


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("seed=abc", "seed='abc': expected an integer"),
        ("trainer.max_steps=abc", "trainer.max_steps='abc': expected an integer >= 1, or -1"),
        ("trainer.max_epochs=0", "trainer.max_epochs=0: expected an integer >= 1, or -1 for no limit"),
        (
            "trainer.num_sanity_val_steps=-5",
            "trainer.num_sanity_val_steps=-5: expected an integer >= 0, or -1",
        ),
        (
            "model/decoder=hard_reinforce model.decoder.attention.entropy_weight=-1",
            "entropy_weight=-1 must be >= 0",
        ),
        ("model.optimizer.lr=-0.1", "model.optimizer.lr=-0.1: expected a number in (0, 10)"),
        # The encoder's rate is lr_scale x lr: its scale is bounded, and the product held to the bound on lr.
        ("model.encoder.lr_scale=1e9", "model.encoder.lr_scale=1000000000.0: expected a number in (0, 10]"),
        ("model.encoder.lr_scale=0", "model.encoder.lr_scale=0: expected a number in (0, 10]"),
        (
            "model.optimizer.lr=2 model.encoder.lr_scale=8",
            "model.encoder.lr_scale=8: the encoder trains at lr_scale x model.optimizer.lr = 16; expected a rate "
            "in (0, 10)",
        ),
        ("model.decoding.max_new_tokens=0", "max_new_tokens=0: expected an integer in [1, 1000]"),
        ("model.val_metrics=[BLEU4]", "model.val_metrics=['BLEU4']: expected a non-empty list of Bleu_1"),
        ("callbacks.model_checkpoint.monitor=val/CIDER", "callbacks.model_checkpoint.monitor='val/CIDER'"),
        ("data.max_caption_length=0", "data.max_caption_length=0: expected an integer >= 1"),
        (
            "model.decoder.attention.attention_dim=0",
            "model.decoder.attention.attention_dim=0: expected an integer",
        ),
        (
            "model.decoder.hidden_dim=400000",
            "model.decoder.hidden_dim=400000: expected an integer in [1, 16384]",
        ),
        # Values checked against the annotation of the argument they become (captioning/training/typecheck.py)
        ("model.decoder.gate=maybe", "model.decoder.gate='maybe': expected a boolean (argument of"),
        ("model.compile=maybe", "model.compile='maybe': expected a boolean"),
        ("data.batch_size=null", "data.batch_size=None: expected an integer"),
        ("+foo=1", "foo: unknown top-level key"),
        ("model.scheduler.warmup_steps=-10", "model.scheduler.warmup_steps=-10: expected an integer >= 0"),
        ("model.scheduler.min_lr_ratio=5", "model.scheduler.min_lr_ratio=5: expected a number in [0, 1]"),
        ("trainer.check_val_every_n_epoch=0", "trainer.check_val_every_n_epoch=0: expected an integer >= 1"),
    ],
)
def test_config_values_are_checked_before_anything_runs(
    override, fragment, tmp_path, no_data_no_training
) -> None:
    """One line naming the key, the value and what was expected; no data read, no model built, in seconds."""
    from captioning.errors import ConfigError

    cfg = compose_train([*TINY, *override.split()], tmp_path)
    with pytest.raises(ConfigError) as info:
        train(cfg)
    assert fragment in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "checkpoints").exists()


def test_a_vocabulary_of_special_tokens_only_is_refused(tmp_path) -> None:
    from captioning.errors import ConfigError

    cfg = compose_train([*TINY, "data.min_word_count=100000"], tmp_path)
    with pytest.raises(ConfigError, match="data.min_word_count=100000: no word of the training captions"):
        train(cfg)


def test_a_data_source_argument_of_the_wrong_type_is_refused_before_reading(tmp_path) -> None:
    from captioning.errors import ConfigError

    cfg = compose_train([*TINY, "data.train.seed=abc"], tmp_path)  # (the fixture above would hide the source)
    with pytest.raises(ConfigError, match=r"data.train.seed='abc': expected an integer \(argument of"):
        train(cfg)


def test_a_callback_refusing_its_arguments_is_one_config_error_line(tmp_path) -> None:
    from captioning.errors import ConfigError

    cfg = compose_train([*TINY, "callbacks.progress_lines.every_n_steps=-1"], tmp_path)
    with pytest.raises(ConfigError) as info:
        train(cfg)
    assert "every_n_steps=-1" in str(info.value) and "\n" not in str(info.value), str(info.value)
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize(
    ("precision", "expected"),
    [
        ("bf16-true", "bf16 (8 significant bits)"),
        ("16-true", "16 (11 significant bits)"),
        ("bf16-mixed", None),
    ],
)
def test_half_precision_weights_are_said_at_start_with_the_learning_rate(precision, expected) -> None:
    # bf16-true trains on bf16 weights and AdamW state: SCST's lr 2e-5 is below a weight's last bit, so
    # the run may silently learn nothing; one line says so (not refused: memory may leave no choice).
    from captioning.training.startup import low_precision_note

    cfg = compose_train([*TINY, f"trainer.precision={precision}", "model.optimizer.lr=2e-5"])
    note = low_precision_note(cfg)
    if expected is None:
        assert note is None
    else:
        assert note.startswith(f"note: trainer.precision={precision}") and expected in note
        assert "lr=2e-05" in note and "-mixed keeps float32 weights" in note
