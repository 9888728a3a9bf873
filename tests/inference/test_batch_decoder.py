"""The one decode path: the Captioner, `captioning caption`, evaluate/tune's `decode_source` and the caption
bank all go through `BatchDecoder`, so they give the same captions for the same images and fail the same
way on a broken network. Checkpoints are built directly (support.corpus), never trained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from captioning import Captioner
from captioning.checkpoints.load import load_checkpoint
from captioning.cli.main import main
from captioning.data.datamodule import ImageLoader
from captioning.data.sources import SyntheticSource
from captioning.data.vocab import Vocab
from captioning.decoding import GenerationConfig
from captioning.decoding.captions import EmptyCaptions, NonFiniteScores
from captioning.inference import captioner as captioner_module
from captioning.inference.batch_decoder import BatchDecoder, batch_label
from captioning.inference.caption_bank import CaptionBank
from captioning.inference.split_decoding import build_caption_bank, decode_source

from support.hostile import mutated, set_first

IMAGES = 5
BATCH = 3  # two batches, the second short: the same split into batches on every path


@pytest.fixture(scope="module")
def checkpoint(make_checkpoint) -> Path:
    return make_checkpoint("shared.ckpt")


@pytest.fixture
def scenes(tmp_path) -> tuple[SyntheticSource, list[Path]]:
    """A synthetic split and the same images as PNG files (lossless: the same pixels on every path)."""
    source = SyntheticSource(IMAGES, seed=3, split="test")
    paths = []
    for i in range(IMAGES):
        paths.append(tmp_path / f"scene{i}.png")
        source.image(i).save(paths[-1])
    return source, paths


@pytest.fixture
def decode_calls(monkeypatch) -> list[int]:
    """The batch size of every BatchDecoder.decode call, whoever made it."""
    calls: list[int] = []
    original = BatchDecoder.decode

    def spy(self, batch, *args, **kwargs):
        calls.append(batch.shape[0])
        return original(self, batch, *args, **kwargs)

    monkeypatch.setattr(BatchDecoder, "decode", spy)
    return calls


@pytest.mark.parametrize("options", [{"num_beams": 1}, {"num_beams": 3, "length_penalty": 0.5}])
def test_the_api_the_cli_and_evaluate_decode_the_same_images_identically_through_one_decoder(
    checkpoint, scenes, decode_calls, options, capsys
):
    source, paths = scenes
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in options.items()]
    argv = [
        "caption",
        *map(str, paths),
        "--checkpoint",
        str(checkpoint),
        "--json",
        "--batch-size",
        str(BATCH),
    ]
    assert main([*argv, *flags]) == 0
    cli = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert decode_calls == [3, 2]

    api = Captioner.from_checkpoint(checkpoint).caption(paths, batch_size=BATCH, **options)
    assert decode_calls == [3, 2] * 2

    model = load_checkpoint(checkpoint)
    decoding = GenerationConfig.from_dict(model.decoding).replace(**options).to_dict()
    split = decode_source(model, source, decoding, batch_size=BATCH)
    assert decode_calls == [3, 2] * 3

    assert [r["image"] for r in cli] == [str(p) for p in paths] == [r.image for r in api]
    assert [r["caption"] for r in cli] == [r.caption for r in api] == split.captions
    assert [r["tokens"] for r in cli] == [r.tokens for r in api] == split.tokens
    for record, result, attention in zip(cli, api, split.attention):
        assert record["score"] == pytest.approx(result.score, abs=0)
        assert torch.equal(torch.tensor(record["attention"]), torch.from_numpy(attention))  # (T, L)
        assert torch.equal(
            torch.from_numpy(result.attention.reshape(len(result.tokens), -1)), torch.from_numpy(attention)
        )


def test_the_cli_hands_paths_to_the_api_and_reads_each_image_once_never_back_from_a_tensor(
    checkpoint, scenes, monkeypatch, capsys
):
    _, paths = scenes
    seen, converted = [], []
    as_pil, to_tensor = captioner_module.as_pil, captioner_module.image_to_tensor
    monkeypatch.setattr(captioner_module, "as_pil", lambda image: seen.append(image) or as_pil(image))
    monkeypatch.setattr(
        captioner_module, "image_to_tensor", lambda *a: converted.append(a[0].size) or to_tensor(*a)
    )
    assert main(["caption", *map(str, paths), "--checkpoint", str(checkpoint)]) == 0
    assert seen == paths  # the paths themselves, each read once: no image -> tensor -> image round trip
    assert len(converted) == IMAGES
    assert len(capsys.readouterr().out.splitlines()) == IMAGES


def test_unreadable_inputs_leave_the_batches_full_of_readable_images(checkpoint, scenes, tmp_path):
    _, paths = scenes
    missing = tmp_path / "missing.png"
    model = Captioner.from_checkpoint(checkpoint)
    batches = list(model.iter_batches([paths[0], missing, paths[1], paths[2]], batch_size=2))
    assert [b.indices for b in batches] == [[0, 2], [3]]
    assert [[i for i, _, _ in b.failures] for b in batches] == [[1], []]
    assert "no such image file" in batches[0].failures[0][2]
    assert [r.image for b in batches for r in b.results] == [str(p) for p in paths[:3]]
    assert all(b.broken is None and b.pictures == [] for b in batches)
    with_pictures = next(model.iter_batches(paths[:1], overlay_side=8))
    assert [p.size for p in with_pictures.pictures] == [(8, 8)]  # a shrunk copy for the overlay


@pytest.mark.parametrize(
    "mutation,error,reason",
    [
        (set_first("out.weight", lambda t: t.sign() * 3e38), NonFiniteScores, "scores are not finite"),
        (
            set_first("out.bias", lambda t: t.index_fill(0, torch.tensor([Vocab.end_id]), 3e4)),
            EmptyCaptions,
            "is empty",
        ),
    ],
)
def test_a_broken_network_fails_the_same_way_on_every_path(
    checkpoint, scenes, tmp_path, capsys, mutation, error, reason
):
    source, paths = scenes
    broken = mutated(checkpoint, tmp_path / "broken.ckpt", mutation)
    with pytest.raises(error) as from_api:
        Captioner.from_checkpoint(broken).caption(paths, batch_size=BATCH, num_beams=2)
    with pytest.raises(error) as from_split:
        decode_source(load_checkpoint(broken), source, {"num_beams": 2}, batch_size=BATCH)
    assert from_api.value.reason == from_split.value.reason and reason in from_api.value.reason
    assert str(broken) in from_api.value.reason
    argv = [
        "caption",
        *map(str, paths),
        "--checkpoint",
        str(broken),
        "--batch-size",
        str(BATCH),
        "--num-beams",
        "2",
    ]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    for path in paths:  # every image of every broken batch named, with the same reason
        assert f"captioning caption: error: {path}: {from_api.value.reason}" in err.splitlines()
    # the images were read: the count says what went wrong
    assert (
        err.splitlines()[-1]
        == f"captioning caption: {len(paths)} of {len(paths)} images got no caption from the network (above)"
    )
    assert "could not be read" not in err


def test_the_decoder_groups_each_images_n_best_and_names_its_batch(checkpoint):
    model = load_checkpoint(checkpoint)
    decoder = BatchDecoder.of(model)
    images = torch.rand(2, 3, model.image_size, model.image_size)
    config = GenerationConfig.from_dict(model.decoding).replace(num_beams=3, num_return_sequences=3)
    per_image = decoder.decode(images, config, ["a", "b"])
    assert [len(c) for c in per_image] == [3, 3]
    for captions in per_image:
        assert [c.score for c in captions] == sorted((c.score for c in captions), reverse=True)
    alone = decoder.decode(images[1:], config, ["b"])[0]
    assert [c.words for c in alone] == [c.words for c in per_image[1]]
    with pytest.raises(ValueError, match="1 names for a batch of 2"):
        decoder.decode(images, config, ["a"])
    assert batch_label(["x.jpg"]) == "x.jpg"
    assert batch_label(["x.jpg", "y.jpg", "z.jpg"]) == "x.jpg and the 2 other images of its batch"


def test_the_bank_encodes_through_the_same_decoder(checkpoint, scenes, monkeypatch):
    source, _ = scenes
    model = load_checkpoint(checkpoint)
    encoded: list[int] = []
    original = BatchDecoder.encode

    def spy(self, batch, **kwargs):
        encoded.append(batch.shape[0])
        return original(self, batch, **kwargs)

    monkeypatch.setattr(BatchDecoder, "encode", spy)
    bank = build_caption_bank(model, source, None, batch_size=BATCH)
    assert encoded == [3, 2] and bank.image_ids == list(range(IMAGES))
    reference = CaptionBank.build(
        model.net.encode, ImageLoader(source, model.image_size), source
    )  # one batch
    assert torch.allclose(bank.vectors, reference.vectors, atol=1e-6)
    assert bank.captions == reference.captions


def test_an_empty_batch_names_the_beam_search_that_favours_short_captions():
    from captioning.decoding.config import GenerationConfig

    short = EmptyCaptions("a.png", "m.ckpt", GenerationConfig(num_beams=3, length_penalty=0.0))
    assert (
        "length_penalty=0.0 ranks by total log-probability; try length_penalty=1 or num_beams=1"
        in short.reason
    )
    greedy, normalised = (
        GenerationConfig(num_beams=1, length_penalty=0.0),
        GenerationConfig(num_beams=3, length_penalty=1.0),
    )
    for config in (greedy, normalised, None):
        plain = EmptyCaptions("a.png", "m.ckpt", config)  # greedy, or lp 1: only the weights are left
        assert plain.reason.endswith("its weights are broken or untrained (m.ckpt)"), plain.reason
