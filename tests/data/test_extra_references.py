"""A teacher's captions join the training references (distillation): exactly the file's, for exactly its split."""

from __future__ import annotations

import json
from pathlib import Path

import hydra
import pytest
from PIL import Image

from captioning.data.datamodule import CaptionDataModule
from captioning.data.extra_references import add_references
from captioning.data.records import DatasetError, ImageRecord
from captioning.data.sources import RecordSource
from captioning.data.vocab import Vocab

from support import compose_train


def _records(folder: Path) -> list[ImageRecord]:
    folder.mkdir(parents=True, exist_ok=True)
    records = []
    for stem, colour, words in (("a", (255, 0, 0), "red"), ("b", (0, 0, 255), "blue")):
        path = folder / f"{stem}.png"
        Image.new("RGB", (8, 8), colour).save(path)
        records.append(ImageRecord(stem, path, (f"a {words} square", f"the {words} box")))
    return records


def _results(path: Path, entries: list) -> Path:
    path.write_text(json.dumps(entries), encoding="utf-8")
    return path


def test_each_images_teacher_captions_follow_its_own_in_file_order_copies_times(tmp_path: Path) -> None:
    records = _records(tmp_path / "img")
    teacher = _results(
        tmp_path / "t.json",
        [
            {"image_id": "b", "caption": "a blue square"},
            {"image_id": "a", "caption": " a red box "},
            {"image_id": "a", "caption": "red"},
        ],
    )
    once = add_references(records, teacher, copies=1)
    assert [r.extra_captions for r in once] == [("a red box", "red"), ("a blue square",)]
    assert [r.captions for r in once] == [r.captions for r in records]  # the people's, kept apart
    assert RecordSource(records, extra_references=str(teacher)).captions(0) == (
        "a red square",
        "the red box",
        "a red box",
        "red",
    )
    twice = add_references(records, teacher, copies=2)
    assert twice[1].extra_captions == ("a blue square", "a blue square")
    assert [r.path for r in twice] == [r.path for r in records]
    assert records[0].extra_captions == ()  # the readers' records are not changed


@pytest.mark.parametrize(
    ("entries", "fragment"),
    [
        (  # another split's file: its captions would leak into training
            [
                {"image_id": "a", "caption": "x y"},
                {"image_id": "b", "caption": "x"},
                {"image_id": "dev1", "caption": "x"},
            ],
            r"t\.json: 1 image id\(s\) not in this split's 2 images, e\.g\. \['dev1'\]",
        ),
        (
            [{"image_id": "a", "caption": "x y"}],
            r"t\.json: no caption for 1 of this split's 2 images, e\.g\. \['b'\]",
        ),
        ([{"image_id": "a", "caption": 3}], r"t\.json entry 0: caption is 3; expected a string"),
        ([{"image_id": "a", "caption": " ?! "}], r"t\.json entry 0: caption ' \?! ' has no word tokens"),
        (
            [{"image_id": ["a"], "caption": "x"}],
            r"t\.json entry 0: image_id \['a'\]; expected an integer or a string",
        ),
        ([{"caption": "x"}], r"t\.json entry 0: .*expected an object with image_id and caption"),
        ({"a": "x"}, r"t\.json: expected a non-empty JSON list of \{image_id, caption\}"),
        ([], r"t\.json: expected a non-empty JSON list"),
    ],
)
def test_a_file_not_of_this_split_or_malformed_is_one_error_naming_file_and_entry(
    tmp_path: Path, entries, fragment: str
) -> None:
    records = _records(tmp_path / "img")
    with pytest.raises(DatasetError, match=fragment):
        add_references(records, _results(tmp_path / "t.json", entries), copies=1)


def test_a_missing_file_or_bad_copies_is_refused(tmp_path: Path) -> None:
    records = _records(tmp_path / "img")
    with pytest.raises(DatasetError, match=r"gone\.json: not found"):
        add_references(records, tmp_path / "gone.json", copies=1)
    teacher = _results(
        tmp_path / "t.json", [{"image_id": "a", "caption": "x"}, {"image_id": "b", "caption": "x"}]
    )
    for copies in (0, True, 1.5):
        with pytest.raises(ValueError, match=r"extra_copies="):
            add_references(records, teacher, copies=copies)


def test_the_data_module_trains_on_the_extra_pairs_and_validates_on_the_human_references_only(
    tmp_path: Path,
) -> None:
    records = _records(tmp_path / "img")
    teacher = _results(
        tmp_path / "t.json",
        [{"image_id": "a", "caption": "a red box"}, {"image_id": "b", "caption": "a blue box"}],
    )
    data = CaptionDataModule(
        train=RecordSource(records, extra_references=str(teacher), extra_copies=2),
        val=RecordSource(records),
        image_size=8,
    )
    train, val = data.split("train"), data.split("val")
    assert [len(t) for t in train.tokens] == [4, 4] and [len(t) for t in val.tokens] == [2, 2]
    assert len(data.train_dataloader().dataset) == 8  # cross-entropy: one (image, caption) pair each
    vocab = data.build_vocab()
    assert [" ".join(vocab.decode(t.tolist())) for t in train.tokens[1][2:]] == ["a blue box", "a blue box"]


def records_in(folder: str) -> list[ImageRecord]:
    """The two-image reader of these tests, as a config's ``records`` node can name it."""
    return _records(Path(folder))


def test_the_keys_reach_the_training_source_a_data_config_builds(tmp_path: Path) -> None:
    """``++data.train.extra_references`` on a shipped data config: the training source Hydra builds from it
    carries the teacher's captions (its reader swapped for this test's), the dev source does not."""
    teacher = _results(
        tmp_path / "t.json", [{"image_id": "a", "caption": "a red box"}, {"image_id": "b", "caption": "x"}]
    )
    cfg = compose_train(
        ["data=flickr8k", f"++data.train.extra_references={teacher}", "++data.train.extra_copies=2"]
    )
    cfg.data.train.records = {"_target_": f"{__name__}.records_in", "folder": str(tmp_path / "img")}
    train = hydra.utils.instantiate(cfg.data.train)
    assert train.captions(0) == ("a red square", "the red box", "a red box", "a red box")
    assert train.vocabulary_captions(0) == ("a red square", "the red box")
    assert "extra_references" not in cfg.data.val


def test_the_vocabulary_is_the_one_without_the_teacher(tmp_path: Path) -> None:
    """A teacher's words are already in the vocabulary (it was trained on these captions); its counts would
    only reorder it, and a reordered vocabulary refuses init_from, ensembles and reranking with the models
    trained without it."""
    records = _records(tmp_path / "img")
    teacher = _results(
        tmp_path / "t.json",
        [{"image_id": "a", "caption": "box box box box"}, {"image_id": "b", "caption": "box"}],
    )
    plain = CaptionDataModule(train=RecordSource(records), val=RecordSource(records), image_size=8)
    taught = CaptionDataModule(
        train=RecordSource(records, extra_references=str(teacher)), val=RecordSource(records), image_size=8
    )
    counted_with_teacher = Vocab.build(
        c.split() for r in add_references(records, teacher, 1) for c in r.captions + r.extra_captions
    )
    assert counted_with_teacher.itos != plain.build_vocab().itos  # the teacher's counts would reorder it
    assert taught.build_vocab().itos == plain.build_vocab().itos
