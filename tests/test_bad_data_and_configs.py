"""Bad dataset files and training configs give clear errors, before any training time is spent.

Dataset problems go through the real composed data config: an error naming the file and the entry, or, with
``+data.<split>.records.on_error=skip``, skipped and counted in one log line.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import hydra
import pytest
import pytorch_lightning as pl
from hydra.errors import ConfigCompositionException, MissingConfigException
from PIL import Image

from captioning.data.readers import DatasetError
from captioning.data.sources import SyntheticSource
from captioning.training.train import train

from conftest import TINY, compose_train
from corpus import RED

# ----------------------------------------------------------------------------------------- datasets


def _karpathy_files(root: Path) -> Path:
    """A Karpathy split file whose train split holds one good image and one of each problem."""
    for name in ("good.jpg", "dup.jpg", "quiet.jpg", "v.jpg", "t.jpg"):
        Image.new("RGB", (8, 8), RED).save(root / name)
    (root / "corrupt.jpg").write_text("not a JPEG")

    def entry(imgid: int, filename: str, split: str, *raws: str) -> dict:
        return {"imgid": imgid, "filename": filename, "split": split, "sentences": [{"raw": r} for r in raws]}

    images = [
        entry(0, "good.jpg", "train", "A red square.", "..."),
        entry(1, "quiet.jpg", "train", "?!", "   "),  # only punctuation / empty: nothing to learn
        entry(2, "gone.jpg", "train", "A missing picture."),
        entry(0, "dup.jpg", "train", "The same id again."),
        {"imgid": 3, "split": "train", "sentences": []},  # no filename
        entry(4, "v.jpg", "val", "A val image."),
        entry(5, "t.jpg", "test", "A test image."),
    ]
    path = root / "dataset_tiny.json"
    path.write_text(json.dumps({"images": images}), encoding="utf-8")
    return path


def _karpathy_overrides(root: Path, dataset_json: Path) -> list[str]:
    return [
        "data=karpathy",
        f"paths.karpathy_json={dataset_json}",
        f"paths.coco={root}",
        "data.num_workers=0",
        "data.min_word_count=1",
        "data.image_size=16",
        "data.batch_size=2",
    ]


def test_dataset_problem_is_an_error_naming_file_and_entry(tmp_path: Path) -> None:
    dataset_json = _karpathy_files(tmp_path)
    cfg = compose_train(_karpathy_overrides(tmp_path, dataset_json))
    with pytest.raises(Exception) as info:  # Hydra wraps the reader's error, keeping its message
        hydra.utils.instantiate(cfg.data)
    assert isinstance(info.value.__cause__ or info.value, DatasetError)
    assert f"{dataset_json} images[0] (id 0) sentences[1]['raw']" in str(info.value)
    assert "has no word tokens" in str(info.value)


def test_dataset_problems_are_skipped_and_counted_when_the_config_says_so(tmp_path: Path, caplog) -> None:
    dataset_json = _karpathy_files(tmp_path)
    cfg = compose_train([*_karpathy_overrides(tmp_path, dataset_json), "+data.train.records.on_error=skip"])
    with caplog.at_level(logging.WARNING, logger="captioning.data.readers"):
        datamodule = hydra.utils.instantiate(cfg.data)
    train_source = datamodule.sources["train"]
    assert [r.image_id for r in train_source.records] == [0]
    assert train_source.captions(0) == ("A red square.",)
    counts = "1 duplicate id, 3 empty caption, 1 image without valid caption, 1 malformed entry, "
    counts += "1 missing image file"
    assert f"{dataset_json}: skipped {counts}" in caplog.text


def test_a_corrupt_image_in_a_dataset_fails_naming_the_file(tmp_path: Path) -> None:
    """Checked before training reads it: a split whose images are all unreadable is an error naming the
    first file (one bad image among many is skipped: tests/test_readers.py)."""
    dataset_json = _karpathy_files(tmp_path)
    data = json.loads(dataset_json.read_text())
    data["images"][0]["filename"] = "corrupt.jpg"
    dataset_json.write_text(json.dumps(data))
    cfg = compose_train([*_karpathy_overrides(tmp_path, dataset_json), "+data.train.records.on_error=skip",
                         f"paths.cache={tmp_path / 'cache'}"])  # fmt: skip
    datamodule = hydra.utils.instantiate(cfg.data)
    with pytest.raises(
        DatasetError,
        match=rf"train split: 1 of 1 images are unreadable.*{tmp_path / 'corrupt.jpg'}: not a readable image",
    ):
        datamodule.build_vocab()


# ------------------------------------------------------------------------------------------ configs


@pytest.fixture
def no_data_no_training(monkeypatch):
    """Make reading data or starting to train an immediate test failure."""

    def refuse(*args, **kwargs):
        raise AssertionError("data were read or training started before the config was checked")

    monkeypatch.setattr(SyntheticSource, "__init__", refuse)
    monkeypatch.setattr(pl.Trainer, "fit", refuse)


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
    from captioning.training.validate import ConfigError

    cfg = compose_train([*TINY, *override.split()], tmp_path)
    with pytest.raises(ConfigError) as info:
        train(cfg)
    assert fragment in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "checkpoints").exists()


def test_a_vocabulary_of_special_tokens_only_is_refused(tmp_path) -> None:
    from captioning.training.validate import ConfigError

    cfg = compose_train([*TINY, "data.min_word_count=100000"], tmp_path)
    with pytest.raises(ConfigError, match="data.min_word_count=100000: no word of the training captions"):
        train(cfg)


def test_a_data_source_argument_of_the_wrong_type_is_refused_before_reading(tmp_path) -> None:
    from captioning.training.validate import ConfigError

    cfg = compose_train([*TINY, "data.train.seed=abc"], tmp_path)  # (the fixture above would hide the source)
    with pytest.raises(ConfigError, match=r"data.train.seed='abc': expected an integer \(argument of"):
        train(cfg)


def test_a_callback_refusing_its_arguments_is_one_config_error_line(tmp_path) -> None:
    from captioning.training.validate import ConfigError

    cfg = compose_train([*TINY, "callbacks.progress_lines.every_n_steps=-1"], tmp_path)
    with pytest.raises(ConfigError) as info:
        train(cfg)
    assert "every_n_steps=-1" in str(info.value) and "\n" not in str(info.value), str(info.value)
    assert not (tmp_path / "checkpoints").exists()
