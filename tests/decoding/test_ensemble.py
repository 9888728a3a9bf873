"""Ensembles: the decoders' mean next-word distribution, searched like one decoder; members with their own
encoders each read their own grid; loading refuses members without the same words, input size and grid
size."""

from __future__ import annotations

import json

import pytest
import torch

from captioning.checkpoints.ensemble import load_ensemble
from captioning.checkpoints.load import CheckpointError, load_checkpoint
from captioning.cli.main import main
from captioning.data.features import state_dict_hash
from captioning.decoding import generate
from captioning.models.decoders.ensemble import EnsembleDecoder, FeatureSlice
from captioning.models.encoders.ensemble import EnsembleEncoder

from support import DECODERS
from support.corpus import build_module, checkpoint_dict
from support.helpers import build_net, random_batch


def _members(names=DECODERS):  # every decoder config of captioning/conf/model/decoder/, over the same grid
    nets = [build_net(name, seed=i) for i, name in enumerate(names)]
    return [net.decoder.eval() for net in nets], nets[0]


def test_each_step_is_the_mean_of_the_members_distributions():
    decoders, net = _members()
    ensemble = EnsembleDecoder(decoders).eval()
    features, tokens = random_batch(net)
    states = [d.init_state(features) for d in decoders]
    state = ensemble.init_state(features)
    for t in range(tokens.shape[1]):
        logp, att, state = ensemble.step(tokens[:, t], state)  # (B, V), (B, L)
        outs = [d.step(tokens[:, t], s) for d, s in zip(decoders, states)]
        states = [o[2] for o in outs]
        mean_p = torch.stack([o[0].softmax(-1) for o in outs]).mean(0)  # (B, V)
        torch.testing.assert_close(logp.exp(), mean_p, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(att, torch.stack([o[1] for o in outs]).mean(0), atol=1e-6, rtol=1e-5)
    assert logp.exp().sum(-1).sub(1).abs().max() < 1e-5  # a distribution, so searches read it as log p


def test_teacher_forcing_gives_the_same_distributions_as_stepping():
    decoders, net = _members()
    ensemble = EnsembleDecoder(decoders).eval()
    features, tokens = random_batch(net)
    full = ensemble(features, tokens)  # (B, T, V) log of the mean p
    state = ensemble.init_state(features)
    for t in range(tokens.shape[1]):
        logp, att, state = ensemble.step(tokens[:, t], state)
        torch.testing.assert_close(logp, full.logits[:, t], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(att, full.attention[:, t], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("num_beams", [1, 4])
@pytest.mark.parametrize("name", DECODERS)
def test_a_model_ensembled_with_itself_decodes_as_the_model(name, num_beams):
    (decoder,), net = _members([name])
    features, _ = random_batch(net, batch=4)
    alone = generate(decoder, features, num_beams=num_beams, max_new_tokens=8)
    twice = generate(EnsembleDecoder([decoder, decoder]), features, num_beams=num_beams, max_new_tokens=8)
    assert torch.equal(alone.tokens, twice.tokens)
    torch.testing.assert_close(twice.log_prob, alone.log_prob, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(twice.attention, alone.attention, atol=1e-6, rtol=1e-6)


def test_beam_search_scores_are_the_ensembles_own_log_likelihoods():
    # Beams swap rows every step: if the members' prefixed states were reordered wrongly, the search's
    # sums would differ from the teacher-forced log-likelihood of the captions it returns.
    decoders, net = _members()
    ensemble = EnsembleDecoder(decoders).eval()
    features, _ = random_batch(net, batch=3)
    out = generate(ensemble, features, num_beams=3, max_new_tokens=6, length_penalty=0.0)
    start = torch.ones(out.tokens.shape[0], 1, dtype=torch.long)  # <start>
    full = ensemble(features, torch.cat([start, out.tokens[:, :-1]], 1))  # (B, T, V), one row per image
    token_logp = full.logits.gather(2, out.tokens.unsqueeze(2)).squeeze(2)  # (B, T)
    steps = torch.arange(out.tokens.shape[1]).unsqueeze(0) < out.lengths.unsqueeze(1)
    torch.testing.assert_close((token_logp * steps).sum(1), out.log_prob, atol=1e-4, rtol=1e-4)


def test_expected_context_switches_every_hard_member():
    (decoder,), net = _members(["hard_reinforce"])
    features, _ = random_batch(net, batch=3)
    alone = generate(decoder, features, num_beams=2, max_new_tokens=6, hard_attention="expected")
    twice = generate(
        EnsembleDecoder([decoder, decoder]),
        features,
        num_beams=2,
        max_new_tokens=6,
        hard_attention="expected",
    )
    cell = generate(decoder, features, num_beams=2, max_new_tokens=6)
    torch.testing.assert_close(twice.log_prob, alone.log_prob, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(cell.attention, alone.attention)  # the two readings differ at all


def test_members_must_share_the_vocabulary_and_the_grid():
    decoders, _ = _members(["soft"])
    with pytest.raises(ValueError, match="at least 2 decoders"):
        EnsembleDecoder(decoders)
    other = build_net("soft", vocab_size=15).decoder
    with pytest.raises(ValueError, match=r"vocabulary size and the feature dim.*\(12, .*\(15, "):
        EnsembleDecoder([decoders[0], other])


def _write(path, words=("a", "red", "circle", "square", "left", "of"), extra=None, decoder_seed=None):
    module = build_module(list(words), extra)  # seeded: the same encoder weights every time
    if decoder_seed is not None:  # another member: same encoder, other decoder weights
        torch.manual_seed(decoder_seed)
        for p in module.net.decoder.parameters():
            p.data.normal_(0.0, 0.1)
    torch.save(checkpoint_dict(module), path)
    return path


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ensemble")
    a = _write(folder / "a.ckpt")
    b = _write(folder / "b.ckpt", extra=["model/decoder=transformer"], decoder_seed=1)
    return a, b


def test_load_ensemble_joins_the_decoders_behind_one_encoder(pair):
    a, b = pair
    loaded = load_ensemble([a, b])
    first, second = load_checkpoint(a), load_checkpoint(b)
    assert isinstance(loaded.net.decoder, EnsembleDecoder) and len(loaded.net.decoder.members) == 2
    assert state_dict_hash(loaded.net.encoder) == state_dict_hash(first.net.encoder)
    assert loaded.vocab == first.vocab and loaded.decoding == first.decoding
    assert loaded.provenance["ensemble"] == [str(a), str(b)]
    images = torch.rand(2, 3, loaded.image_size, loaded.image_size)
    grid = first.net.encode(images)
    out = generate(loaded.net.decoder, loaded.net.encode(images), num_beams=1, max_new_tokens=5)
    ref = generate(
        EnsembleDecoder([first.net.decoder, second.net.decoder]), grid, num_beams=1, max_new_tokens=5
    )
    assert torch.equal(out.tokens, ref.tokens)


def _retrained_encoder(path, shift=0.5):
    """A checkpoint whose encoder trained on (other weights, another grid) and whose decoder differs too."""
    module = build_module(["a", "red", "circle", "square", "left", "of"])
    with torch.no_grad():
        for p in module.net.encoder.parameters():
            p.add_(shift * torch.randn_like(p))
        for p in module.net.decoder.parameters():
            p.normal_(0.0, 0.1)
    torch.save(checkpoint_dict(module), path)
    return path


def test_members_with_their_own_encoders_each_read_their_own_grid(pair, tmp_path):
    a, _ = pair
    c = _retrained_encoder(tmp_path / "encoder.ckpt")
    loaded = load_ensemble([a, c, a])  # a twice: its one encoder runs once
    first, other = load_checkpoint(a), load_checkpoint(c)
    encoder = loaded.net.encoder
    assert isinstance(encoder, EnsembleEncoder) and len(encoder.encoders) == 2
    d = first.net.encoder.out_dim
    assert encoder.out_dim == 2 * d and encoder.slices() == [(0, d), (d, 2 * d)]
    images = torch.rand(2, 3, loaded.image_size, loaded.image_size)
    own = [first.net.encode(images), other.net.encode(images)]  # (B, L, D) each
    grid = loaded.net.encode(images)  # (B, L, 2D)
    torch.testing.assert_close(grid, torch.cat(own, -1))
    # Teacher-forced: the mean of the members' distributions, each over its own encoder's grid.
    tokens = torch.randint(4, len(loaded.vocab), (2, 6))
    probs = [m.net(images, tokens).logits.softmax(-1) for m in (first, other, first)]  # (B, T, V) each
    full = loaded.net(images, tokens)
    torch.testing.assert_close(full.logits.exp(), torch.stack(probs).mean(0), atol=1e-5, rtol=1e-4)
    # Each member decoded alone over the shared grid (consensus reranking's candidates) is that member.
    members = loaded.net.decoder.members
    assert all(isinstance(m, FeatureSlice) for m in members)
    for member, alone, own_grid in zip(members, (first, other), own):
        ours = generate(member, grid, num_beams=2, max_new_tokens=5)
        ref = generate(alone.net.decoder, own_grid, num_beams=2, max_new_tokens=5)
        assert torch.equal(ours.tokens, ref.tokens)
        torch.testing.assert_close(ours.log_prob, ref.log_prob)
    same = load_ensemble([a, a])  # one encoder for all: no concatenation
    assert not isinstance(same.net.encoder, EnsembleEncoder)


def test_a_feature_slice_must_fit_its_decoder():
    (decoder,), _ = _members(["soft"])
    d = decoder.feature_dim
    with pytest.raises(ValueError, match=rf"FeatureSlice \[1, {d + 1}\) of a {d}-dim grid"):
        FeatureSlice(decoder, 1, d + 1, d)
    with pytest.raises(ValueError, match="reads"):
        FeatureSlice(decoder, 0, d - 1, 2 * d)


def test_an_ensemble_encoder_joins_two_or_more_grids_of_one_size():
    small, wide = build_net("soft").encoder, build_net("soft", extra=["model.encoder.grid_size=2"]).encoder
    with pytest.raises(ValueError, match="at least 2 encoders, got 1"):
        EnsembleEncoder([small])
    with pytest.raises(ValueError, match=rf"same grid; got grid_size {small.grid_size}, 2"):
        EnsembleEncoder([small, wide])


def test_load_ensemble_refuses_members_that_do_not_fit_naming_both(pair, tmp_path):
    a, _ = pair
    words = _write(tmp_path / "words.ckpt", words=("a", "blue", "circle", "square", "left", "of"))
    with pytest.raises(CheckpointError, match=r"ensemble: .*a\.ckpt and .*words\.ckpt have different vocab"):
        load_ensemble([a, words])
    grid = _write(tmp_path / "grid.ckpt", extra=["model.encoder.grid_size=2"])
    with pytest.raises(CheckpointError, match=r"a\.ckpt and .*grid\.ckpt read \dx\d and 2x2 grids"):
        load_ensemble([a, grid])
    size = _write(tmp_path / "size.ckpt", extra=["data.image_size=64"])
    with pytest.raises(CheckpointError, match=r"a\.ckpt and .*size\.ckpt were trained at \d+ and 64 px"):
        load_ensemble([a, size])


def test_evaluate_cli_scores_an_ensemble(pair, tmp_path, capsys):
    a, b = pair
    out = tmp_path / "eval"
    args = ["evaluate", "--checkpoint", str(a), "--out-dir", str(out), "--checkpoint", str(b)]
    assert main([*args, "data.test.num_images=4", "tokenizer=simple"]) == 0
    printed = capsys.readouterr().out
    scores = json.loads((out / "scores.json").read_text())
    assert scores["checkpoint"] == f"{a} + {b}" and f"checkpoint: {a} + {b}" in printed
    assert scores["num_images"] == 4 and 0.0 <= scores["scores"]["Bleu_4"] <= 1.0
    assert main(["evaluate", "--checkpoint", str(a), "--checkpoint", str(tmp_path / "missing.ckpt")]) == 2
    assert "missing.ckpt" in capsys.readouterr().err
    c = _retrained_encoder(tmp_path / "encoder.ckpt")  # its own encoder: the grids side by side
    mixed = tmp_path / "mixed"
    args = ["evaluate", "--checkpoint", str(a), "--checkpoint", str(c), "--out-dir", str(mixed)]
    assert main([*args, "data.test.num_images=4", "tokenizer=simple"]) == 0
    assert json.loads((mixed / "scores.json").read_text())["num_images"] == 4


def test_a_mixed_ensemble_has_its_own_caption_bank_for_reranking(pair, tmp_path, capsys):
    from PIL import Image

    a, _ = pair
    c = _retrained_encoder(tmp_path / "encoder.ckpt")  # its own encoder: the grids side by side
    Image.new("RGB", (40, 40), (200, 30, 30)).save(tmp_path / "red.png")
    bank = tmp_path / "bank.safetensors"
    both = ["--checkpoint", str(a), "--checkpoint", str(c)]
    assert main(["bank", *both, "--out", str(bank), "data.train.num_images=6"]) == 0
    assert "-d pooled grids" in capsys.readouterr().out
    caption = ["caption", str(tmp_path / "red.png"), "--rerank", str(bank), "--json"]
    assert main([*caption, *both]) == 0
    assert json.loads(capsys.readouterr().out)["caption"]
    assert main([*caption, "--checkpoint", str(a)]) == 2  # one member's encoder is not the ensemble's
    assert "caption bank: built with another encoder" in capsys.readouterr().err


def test_the_python_api_and_the_caption_command_read_an_ensemble(pair, tmp_path, capsys):
    from PIL import Image

    from captioning import Captioner
    from captioning.data.images import image_to_tensor

    a, b = pair
    image = Image.new("RGB", (40, 40), (200, 30, 30))
    image.save(tmp_path / "red.png")
    model = Captioner.from_checkpoint([a, b])
    assert isinstance(model.net.decoder, EnsembleDecoder)
    expected = load_ensemble([a, b])
    result = model.caption(image, num_beams=2)[0]
    grid = expected.net.encode(image_to_tensor(image, model.image_size).unsqueeze(0))  # (1, L, D)
    ref = generate(expected.net.decoder, grid, model.decoding, num_beams=2)
    assert result.tokens == expected.vocab.decode(ref.tokens[0].tolist())
    assert result.log_prob == pytest.approx(ref.log_prob.item(), abs=1e-5)
    assert (
        main(
            [
                "caption",
                str(tmp_path / "red.png"),
                "--checkpoint",
                str(a),
                "--checkpoint",
                str(b),
                "--json",
                "--num-beams",
                "2",
            ]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out)  # one image: one object
    assert printed["caption"] == result.caption
    with pytest.raises(TypeError, match="or a list of them"):
        Captioner.from_checkpoint([])


def test_tune_searches_an_ensembles_decoding_and_refuses_to_write_it(pair, tmp_path, capsys):
    a, b = pair
    out = tmp_path / "tuning.json"
    argv = ["tune", "--checkpoint", str(a), "--checkpoint", str(b), "--num-beams", "1", "2"]
    argv += ["--length-penalty", "0", "--no-repeat-ngram-size", "0", "--out", str(out)]
    data = ["data=synthetic", "data.val.num_images=6", "feature_cache=false"]
    assert main([*argv, *data]) == 0
    payload = json.loads(out.read_text())
    assert payload["checkpoint"] == f"{a} + {b}" and len(payload["rows"]) == 2
    before = a.read_bytes()
    assert main([*argv, "--write", *data]) == 2  # no one file holds an ensemble's decoding
    assert "--write: an ensemble of 2 checkpoints" in capsys.readouterr().err
    assert a.read_bytes() == before
