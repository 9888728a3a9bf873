"""Consensus reranking (captioning.inference.consensus) and its caption bank (captioning.inference.caption_bank)."""

from __future__ import annotations

import json

import pytest
import torch

from captioning.checkpoints.load import load_checkpoint
from captioning.cli.main import main
from captioning.data.datamodule import ImageLoader
from captioning.data.sources import SyntheticSource
from captioning.decoding import GenerationConfig, generate
from captioning.decoding.captions import Caption, to_captions
from captioning.inference.caption_bank import CaptionBank, pooled
from captioning.inference.captioner import Captioner
from captioning.inference.consensus import ConsensusReranker, RerankConfig, consensus_scores
from captioning.inference.tuning import SplitScorer
from captioning.metrics.cider import CiderD
from captioning.models.decoders.ensemble import EnsembleDecoder

REFS = [
    ["a dog runs on the grass", "a brown dog running through grass", "the dog is running"],
    ["a man sits on a bench", "a man sitting in the park", "an old man on a bench"],
    ["two children play in the water", "kids splash in a pool", "children swimming"],
]


def caption(text: str) -> Caption:
    words = text.split()
    return Caption(words, torch.zeros(len(words), 4), [0.0] * (len(words) + 1), 0.0, 0.0)


def bank_of(vectors: list[list[float]], refs=REFS) -> CaptionBank:
    return CaptionBank(
        torch.nn.functional.normalize(torch.tensor(vectors, dtype=torch.float32), dim=-1),
        refs,
        list(range(len(refs))),
    )


def test_similarity_of_two_vectors_is_the_score_against_that_single_reference():
    cider = CiderD([["a dog runs on the grass"], *REFS[1:]])  # image 0 has one reference
    hyp = "a dog is running on grass"
    one = cider.similarity(cider.vector(hyp), cider.vector("a dog runs on the grass"))
    assert one == pytest.approx(cider.score(hyp, 0), abs=1e-12) and one > 0
    assert cider.similarity(cider.vector(hyp), cider.vector("children swimming")) == 0.0


def test_consensus_score_is_the_mean_over_the_evidence_repeats_counted():
    cider = CiderD(REFS)
    evidence = ["a dog runs", "a dog runs", "a man sits"]
    got = consensus_scores(["a dog runs", "a man sits"], evidence, cider)
    for j, c in enumerate(["a dog runs", "a man sits"]):
        expected = sum(cider.similarity(cider.vector(c), cider.vector(e)) for e in evidence) / 3
        assert got[j] == pytest.approx(expected, abs=1e-12)
    assert got[0] > got[1]  # the caption said twice wins the vote
    assert consensus_scores(["a dog"], [], cider).tolist() == [0.0]


def test_without_neighbours_the_majority_candidate_is_kept():
    reranker = ConsensusReranker(RerankConfig(neighbours=0), bank_of([[1, 0], [0, 1], [1, 1]]))
    options = [[caption("a man sits on a bench"), caption("a dog runs"), caption("a dog runs on grass")]]
    chosen = reranker.choose(options, torch.zeros(1, 3, 2))
    assert " ".join(chosen[0].words) in {"a dog runs", "a dog runs on grass"}  # two of three about a dog
    assert chosen[0] is options[0][1] or chosen[0] is options[0][2]  # the candidate itself, attention and all


def test_the_nearest_images_captions_outvote_the_models_first_choice():
    bank = bank_of([[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]])
    options = [[caption("a man sitting on a bench"), caption("a dog running through the grass")]]
    near_man = torch.tensor([[[0.0, 1.0]]])  # (B=1, L=1, D=2): pooled, nearest to bank image 1
    near_dog = torch.tensor([[[1.0, 0.05]]])
    config = RerankConfig(neighbours=1, weight=100.0)
    assert ConsensusReranker(config, bank).choose(options, near_dog)[0].words[1] == "dog"
    assert ConsensusReranker(config, bank).choose(options, near_man)[0].words[1] == "man"


def test_bank_returns_the_nearest_by_cosine_and_never_the_query_itself():
    bank = bank_of([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]])
    query = torch.tensor([[[1.0, 0.1], [1.0, -0.1]]])  # (1, 2, 2): mean (1, 0)
    assert bank.nearest(query, 3) == [[0, 1, 2]]
    assert bank.nearest(query, 2, exclude=[0]) == [[1, 2]]  # image 0 is the query: left out
    assert bank.nearest(query, 5, exclude=[7]) == [[0, 1, 2]]  # an id outside the bank: nothing left out
    assert pooled(query).norm(dim=-1).tolist() == pytest.approx([1.0])
    with pytest.raises(ValueError, match=r"queries have D=3, the bank D=2"):
        bank.nearest(torch.zeros(1, 4, 3), 1)
    with pytest.raises(ValueError, match="2 vectors, 3 caption lists"):
        CaptionBank(torch.zeros(2, 2), REFS, [0, 1, 2])


def test_queries_are_compared_on_their_device_and_samples_drawn_there():
    # A GPU's queries meet the bank's vectors moved to them (the bank loads on the CPU), and the sampler's
    # generator lives on the features' device (torch.multinomial refuses a CPU generator for GPU tensors).
    # Checked here on the CPU (no GPU in CI): the same paths, the vectors moved once per device.
    bank = bank_of([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]])
    query = torch.tensor([[[1.0, 0.1], [1.0, -0.1]]], dtype=torch.float64)  # half or double grids: pooled
    assert bank.cosines(query).dtype == torch.float32 and bank.nearest(query, 3) == [[0, 1, 2]]
    assert bank.vectors_like(query) is bank.vectors_like(query)
    reranker = ConsensusReranker(RerankConfig(seed=3), bank)
    generator = reranker.generator(query.device)
    assert generator.device == query.device and reranker.generator(query.device) is generator
    assert generator.initial_seed() == 3


def test_bank_built_from_a_source_pools_what_encode_returns():
    source = SyntheticSource(6, seed=3, split="train")
    features = torch.randn(6, 4, 5)
    bank = CaptionBank.build(lambda x: x, lambda i: features[i], source, batch_size=4)
    assert torch.allclose(bank.vectors, pooled(features))
    assert bank.image_ids == [source.image_id(i) for i in range(6)]
    assert bank.captions[2] == [" ".join(c.lower().split()) for c in source.captions(2)]


@pytest.mark.parametrize(
    ("key", "value"), [("top_p", 0.0), ("neighbours", -1), ("num_beams", 0), ("weight", -1.0)]
)
def test_a_bad_rerank_setting_is_one_line_naming_it(key, value):
    with pytest.raises(ValueError, match=rf"rerank\.{key}={value!r}: expected"):
        RerankConfig(**{key: value})


@pytest.fixture(scope="module")
def tiny_checkpoint(make_checkpoint):
    return str(make_checkpoint("tiny.ckpt"))


def test_an_ensembles_candidates_are_each_members_own(tiny_checkpoint):
    net = load_checkpoint(tiny_checkpoint).net
    vocab = load_checkpoint(tiny_checkpoint).vocab
    features = net.encode(torch.rand(2, 3, 64, 64))
    bank = bank_of([[1.0] * features.shape[-1]] * 2, refs=[["a shape"], ["a circle"]])
    reranker = ConsensusReranker(RerankConfig(num_beams=3, num_samples=0), bank)
    single = reranker.candidates(net.decoder, features, vocab, GenerationConfig())
    both = reranker.candidates(
        EnsembleDecoder([net.decoder, net.decoder]), features, vocab, GenerationConfig()
    )
    beams = to_captions(generate(net.decoder, features, num_beams=3, num_return_sequences=3), vocab)
    assert [[c.words for c in image] for image in single] == [
        [c.words for c in beams[b * 3 : b * 3 + 3]] for b in range(2)
    ]
    assert [[c.words for c in image] for image in both] == [[c.words for c in image] * 2 for image in single]


def test_evaluate_with_one_candidate_reranks_to_plain_decoding(tiny_checkpoint, tmp_path, capsys):
    def evaluate(out: str, *overrides: str) -> int:
        data = ["data.test.num_images=6", "data.train.num_images=10"]
        args = ["evaluate", "--checkpoint", tiny_checkpoint, "--out-dir", str(tmp_path / out)]
        return main([*args, *data, *overrides])

    assert evaluate("plain", "decoding.num_beams=1") == 0
    one = ["rerank=consensus", "rerank.num_beams=1", "rerank.num_samples=0", "decoding.num_beams=1"]
    assert evaluate("one", *one) == 0
    assert evaluate("beams", "rerank=consensus", "decoding.num_beams=3") == 2  # never silently ignored
    assert "decoding: num_beams=3 with reranking: " in capsys.readouterr().err
    assert evaluate("full", "rerank=consensus") == 0
    printed = capsys.readouterr().out
    results = {
        name: json.loads((tmp_path / name / "results.json").read_text()) for name in ("plain", "one", "full")
    }
    assert results["one"] == results["plain"]  # a vote over one candidate keeps it
    scores = json.loads((tmp_path / "full" / "scores.json").read_text())
    assert scores["rerank"] == RerankConfig().to_dict() and "rerank: num_beams=5" in printed
    assert json.loads((tmp_path / "plain" / "scores.json").read_text())["rerank"] is None
    # Every kept caption is one of the candidates the reranker was given: the same beams and seeded samples.
    model = load_checkpoint(tiny_checkpoint)
    loader = ImageLoader(SyntheticSource(6, seed=0, split="test"), model.image_size)
    features = model.net.encode(torch.stack([loader(i) for i in range(6)]))
    decoding = GenerationConfig.from_dict(model.decoding).replace(num_beams=3)
    reranker = ConsensusReranker(
        RerankConfig(), bank_of([[1.0] * features.shape[-1]] * 2, refs=[["a shape"], ["a circle"]])
    )
    options = reranker.candidates(model.net.decoder, features, model.vocab, decoding)
    assert len(options[0]) == 15  # 5 beams + 10 samples
    for kept, image in zip(results["full"], options):
        assert kept["caption"] in {" ".join(c.words) for c in image}


def test_evaluate_refuses_a_bad_rerank_value_in_one_line(tiny_checkpoint, capsys):
    code = main(["evaluate", "--checkpoint", tiny_checkpoint, "rerank=consensus", "rerank.top_p=0"])
    err = capsys.readouterr().err
    assert code == 2 and "rerank.top_p" in err and len(err.strip().splitlines()) == 1


def test_a_saved_bank_loads_as_it_was_and_a_bad_file_is_named(tmp_path):
    bank = CaptionBank(pooled(torch.randn(3, 4, 6)), REFS, ["a.jpg", "b.jpg", "c.jpg"], {"grid": 2})
    bank.save(tmp_path / "bank.safetensors")
    again = CaptionBank.load(tmp_path / "bank.safetensors")
    assert torch.allclose(again.vectors, bank.vectors, atol=1e-3)  # stored as float16
    assert (again.captions, again.image_ids, again.encoder) == (
        bank.captions,
        bank.image_ids,
        {"grid": 2},
    )
    (tmp_path / "other.safetensors").write_bytes(b"not a bank")
    with pytest.raises(ValueError, match=r"other\.safetensors: not a caption bank"):
        CaptionBank.load(tmp_path / "other.safetensors")
    from safetensors.torch import save_file

    meta = {"caption_memory": json.dumps({"captions": REFS})}  # no image ids
    save_file({"vectors": torch.zeros(3, 6)}, str(tmp_path / "partial.safetensors"), meta)
    with pytest.raises(ValueError, match=r"partial\.safetensors: not a caption bank .*image_ids"):
        CaptionBank.load(tmp_path / "partial.safetensors")
    with pytest.raises(ValueError, match=r"another encoder than m\.ckpt's \(they differ in grid\)"):
        bank.check_encoder({"grid": 3}, "m.ckpt")


def test_the_python_api_captions_with_a_reranker(tiny_checkpoint):
    captioner = Captioner.from_checkpoint(tiny_checkpoint)
    train_scenes, test_scenes = (
        SyntheticSource(12, seed=1, split="train"),
        SyntheticSource(4, seed=0, split="test"),
    )
    bank = CaptionBank.build(
        captioner.net.encode, ImageLoader(train_scenes, captioner.image_size), train_scenes,
        encoder=captioner.encoder_identity,
    )  # fmt: skip
    images = [test_scenes.image(i) for i in range(4)]
    one = ConsensusReranker(RerankConfig(num_beams=1, num_samples=0, neighbours=0), bank)
    greedy = captioner.caption(images, num_beams=1)
    assert [r.caption for r in captioner.caption(images, num_beams=1, reranker=one)] == [
        r.caption for r in greedy
    ]
    full = captioner.caption(images, reranker=ConsensusReranker(RerankConfig(num_samples=4), bank))
    for result in full:
        texts = [c.caption for c in result.candidates]
        assert texts[0] == result.caption and len(set(texts)) == len(texts)  # the kept one first, no repeats
        assert result.attention.shape == (len(result.tokens), *captioner.grid)
    other = CaptionBank(bank.vectors, bank.captions, bank.image_ids, {**bank.encoder, "grid": -1})
    with pytest.raises(ValueError, match="built with another encoder"):
        captioner.caption(images, reranker=ConsensusReranker(RerankConfig(), other))


def test_the_bank_command_names_each_unreadable_image_then_how_many(
    tiny_checkpoint, tmp_path, capsys, monkeypatch
):
    from captioning.data.images import ImageError
    from captioning.inference import evaluation

    class OneBroken(SyntheticSource):
        def image(self, i):
            if i == 1:
                raise ImageError(f"{tmp_path / 'broken.jpg'}: not a readable image (truncated)")
            return super().image(i)

    monkeypatch.setattr(evaluation, "build_source", lambda data, split: OneBroken(4, seed=0, split="train"))
    bank_file = tmp_path / "bank.safetensors"
    argv = ["memory", "--checkpoint", tiny_checkpoint, "--out", str(bank_file), "feature_cache=false"]
    assert main(argv) == 1  # was 0, with one warning that named the first image only
    out, err = capsys.readouterr()
    assert f"wrote {bank_file}: 3 images" in out and len(CaptionBank.load(bank_file)) == 3
    assert err.splitlines() == [
        f"captioning bank: skipped {tmp_path / 'broken.jpg'}: not a readable image (truncated)",
        "captioning bank: 1 of 4 images could not be read and are not in the bank",
    ]


def test_the_bank_and_caption_commands_rerank_as_the_api_does(tiny_checkpoint, tmp_path, capsys):
    bank_file = tmp_path / "bank.safetensors"
    args = ["bank", "--checkpoint", tiny_checkpoint, "--out", str(bank_file), "data.train.num_images=10"]
    assert main(args) == 0
    bank = CaptionBank.load(bank_file)
    captioner = Captioner.from_checkpoint(tiny_checkpoint)
    assert len(bank) == 10 and bank.encoder == captioner.encoder_identity
    scenes = SyntheticSource(3, seed=0, split="test")
    photos = []
    for i in range(3):
        photos.append(tmp_path / f"scene{i}.png")
        scenes.image(i).save(photos[-1])
    capsys.readouterr()
    assert (
        main(["caption", *map(str, photos), "--checkpoint", tiny_checkpoint, "--rerank", str(bank_file)]) == 0
    )
    printed = [line.split("\t")[1] for line in capsys.readouterr().out.strip().splitlines()]
    api = captioner.caption(photos, reranker=ConsensusReranker(RerankConfig(), bank))
    assert printed == [r.caption for r in api]


def write_bytes(path):
    path.write_bytes(b"\0" * 16)


def write_other_encoders_bank(path):
    CaptionBank(pooled(torch.randn(2, 4, 8)), REFS[:2], [0, 1], {"encoder": "another"}).save(path)


@pytest.mark.parametrize(
    ("write", "message"),
    [
        (write_bytes, "bank.safetensors: not a caption bank"),
        (write_other_encoders_bank, "built with another encoder"),
    ],
)
def test_the_caption_command_refuses_a_bad_bank_in_one_line(
    tiny_checkpoint, tmp_path, capsys, write, message
):
    photo, bank = tmp_path / "scene.png", tmp_path / "bank.safetensors"
    SyntheticSource(1, seed=0, split="test").image(0).save(photo)
    write(bank)
    code = main(["caption", str(photo), "--checkpoint", tiny_checkpoint, "--rerank", str(bank)])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_the_grid_script_scores_what_evaluate_writes_at_the_same_setting(
    tiny_checkpoint, tmp_path, monkeypatch
):
    data = ["data=synthetic", "data.val.num_images=6", "data.train.num_images=10"]
    argv = ["evaluate", "--checkpoint", tiny_checkpoint, "--out-dir", str(tmp_path / "eval"), "split=val"]
    assert main([*argv, *data, "rerank=consensus"]) == 0
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    from experiments import rerank_grid as grid

    out = tmp_path / "grid.json"
    script = ["rerank_grid.py", "--checkpoint", tiny_checkpoint, "--neighbours", "30", "--weights", "16"]
    monkeypatch.setattr("sys.argv", [*script, "--out", str(out), *data])
    grid.main()
    report = json.loads(out.read_text())
    source = SyntheticSource(6, seed=0, split="val")
    written = SplitScorer(source)({i: r["caption"] for i, r in enumerate(results)})
    row = next(r for r in report["rows"] if r["options"] == {"neighbours": 30, "weight": 16.0})
    assert (row["cider"], row["cider_even"], row["cider_odd"]) == pytest.approx(
        (written["all"], written["even"], written["odd"]), abs=1e-12
    )
    assert [r["options"] for r in report["rows"]] == [{"neighbours": 0, "weight": 0.0}, row["options"]]
    assert set(report["held_out"]) == {"chosen_on_even", "chosen_on_odd"}
    quarters = report["by_likeness"]  # least like the bank first; per-image means add up to the row
    assert [q["images"] for q in quarters] == [2, 2, 1, 1]
    cosines = [q["mean_cosine"] for q in quarters]
    assert all(-1 <= c <= 1 for c in cosines) and cosines == sorted(cosines)
    assert sum(q["images"] * q["consensus"] for q in quarters) / 6 == pytest.approx(row["cider"], abs=1e-12)


@pytest.mark.parametrize(
    ("key", "value"),
    [("weight", float("inf")), ("weight", float("nan")), ("neighbours", 2.5), ("num_samples", True),
     ("seed", -1), ("top_p", float("nan"))],
)  # fmt: skip
def test_a_non_finite_or_mistyped_rerank_setting_is_refused_at_start(key, value):
    with pytest.raises(ValueError, match=rf"rerank\.{key}={value!r}: expected"):
        RerankConfig(**{key: value})


def test_caption_rerank_honours_num_beams_and_refuses_sampling_options(tmp_path, capsys):
    from support.corpus import write_checkpoint

    checkpoint = str(write_checkpoint(tmp_path / "m.ckpt"))
    captioner = Captioner.from_checkpoint(checkpoint)
    scenes = SyntheticSource(4, seed=1, split="train")
    bank = CaptionBank.build(
        captioner.net.encode, ImageLoader(scenes, captioner.image_size), scenes,
        encoder=captioner.encoder_identity,
    )  # fmt: skip
    bank_file, photo = tmp_path / "bank.safetensors", tmp_path / "scene.png"
    bank.save(bank_file)
    scenes.image(0).save(photo)
    base = ["caption", str(photo), "--checkpoint", checkpoint, "--rerank", str(bank_file)]
    for extra, message in (
        (["--do-sample"], "do_sample with reranking"),
        (["--num-return-sequences", "2"], "num_return_sequences=2 with reranking"),
    ):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1
    assert main([*base, "--num-beams", "2", "--json"]) == 0  # honoured: the reranker's beams
    printed = json.loads(capsys.readouterr().out)
    two = ConsensusReranker(RerankConfig(num_beams=2), bank)
    assert printed["caption"] == captioner.caption(photo, reranker=two)[0].caption
    with pytest.raises(ValueError, match=r"num_beams=3 with reranking: .* set rerank\.num_beams=3"):
        captioner.caption(photo, num_beams=3, reranker=two)


def test_the_caption_bank_skips_an_unreadable_training_image_and_reports_it(tmp_path):
    from captioning.data.images import ImageError
    from captioning.inference.evaluation import build_caption_bank

    from support.corpus import write_checkpoint

    class OneBroken(SyntheticSource):
        def image(self, i):
            if i == 2:
                raise ImageError("scene2.jpg: not a readable image (truncated)")
            return super().image(i)

    model = load_checkpoint(write_checkpoint(tmp_path / "m.ckpt"))
    source = OneBroken(5, seed=0, split="train")
    skipped: list[str] = []
    bank = build_caption_bank(model, source, None, skipped=skipped)
    assert len(bank) == 4 and bank.image_ids == [source.image_id(i) for i in (0, 1, 3, 4)]
    assert bank.captions[2] == [" ".join(c.lower().split()) for c in source.captions(3)]
    assert skipped == ["scene2.jpg: not a readable image (truncated)"]
    with pytest.warns(UserWarning, match="skipped 1 unreadable images of 5; the first: scene2.jpg"):
        build_caption_bank(model, source, None)


def test_a_one_image_bank_is_refused_in_one_line(tiny_checkpoint, tmp_path, capsys):
    """Its CIDEr-D weights are all 0: every vote would tie (the caption printed was empty, exit 0)."""
    with pytest.raises(ValueError, match="has 1 image; consensus reranking needs at least 2"):
        ConsensusReranker(RerankConfig(), bank_of([[1.0, 0.0]], refs=REFS[:1]))
    bank_file, photo = tmp_path / "bank.safetensors", tmp_path / "scene.png"
    assert (
        main(["bank", "--checkpoint", tiny_checkpoint, "--out", str(bank_file), "data.train.num_images=1"])
        == 0
    )
    SyntheticSource(1, seed=0, split="test").image(0).save(photo)
    capsys.readouterr()
    code = main(["caption", str(photo), "--checkpoint", tiny_checkpoint, "--rerank", str(bank_file)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "needs at least 2" in err


def test_an_empty_candidate_never_wins_over_a_caption():
    reranker = ConsensusReranker(RerankConfig(neighbours=0), bank_of([[1, 0], [0, 1], [1, 1]]))
    options = [[caption(""), caption(""), caption("a dog runs")]]  # the empty one said twice: the majority
    assert reranker.choose(options, torch.zeros(1, 3, 2))[0].words == ["a", "dog", "runs"]
    only_empty = [[caption(""), caption("")]]
    assert reranker.choose(only_empty, torch.zeros(1, 3, 2))[0].words == []
