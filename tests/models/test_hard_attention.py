"""Hard attention layers: argmax / sampled inference, straight-through Gumbel and its temperature,
multi-sample decoding, the attention grad-norm callback, and the caption CLI on hard checkpoints."""

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from PIL import Image
from torch import nn

from captioning.cli.caption import decoding_options
from captioning.cli.main import build_parser, main
from captioning.data.synthetic import render_scene
from captioning.decoding import GenerationConfig
from captioning.decoding.search import generate
from captioning.losses import caption_loss
from captioning.models.attention.gumbel import GumbelHardAttention
from captioning.models.attention.reinforce import ReinforceHardAttention
from captioning.models.decoders.base import shift_inputs
from captioning.training.callbacks.grad_norm import AttentionGradNorm
from captioning.training.train import train

from support import CONF, TINY, compose_train
from support.helpers import build_net, random_batch


@pytest.mark.parametrize("cls", [ReinforceHardAttention, GumbelHardAttention])
def test_inference_is_argmax_by_default_and_samples_alpha_on_request(cls):
    torch.manual_seed(0)
    layer = cls(feature_dim=5, query_dim=4, attention_dim=6).eval()
    features, query = torch.randn(1, 6, 5), torch.randn(1, 4)
    mask = torch.tensor([[True, True, True, True, False, True]])
    keys = layer.precompute(features)
    outs = [layer(query, features, keys, mask) for _ in range(3)]
    assert all(torch.equal(o.weights, F.one_hot(o.alphas.argmax(-1), 6).float()) for o in outs)
    layer.sample_at_inference = True
    n = 20000  # the same image and query N times: each row is an independent draw
    picks = layer(
        query.expand(n, 4), features.expand(n, 6, 5), keys.expand(n, 6, 6), mask.expand(n, 6)
    ).weights
    assert picks[:, 4].sum() == 0  # the masked location is never drawn
    torch.testing.assert_close(picks.mean(0), outs[0].alphas[0], atol=0.015, rtol=0)


def test_gumbel_straight_through_is_one_hot_forward_and_relaxed_backward():
    layer = GumbelHardAttention(feature_dim=5, query_dim=4, attention_dim=6, tau_start=0.7, tau_min=0.7)
    layer.train()
    torch.manual_seed(1)
    features, query, probe = torch.randn(8, 9, 5), torch.randn(8, 4), torch.randn(8, 9)
    keys = layer.precompute(features)
    torch.manual_seed(2)
    out = layer(query, features, keys)
    assert set(out.weights.unique().tolist()) == {0.0, 1.0} and torch.equal(
        out.weights.sum(-1), torch.ones(8)
    )
    assert torch.equal(out.context, features[torch.arange(8), out.weights.argmax(-1)])  # exactly a_{s_t}
    grads = torch.autograd.grad((out.weights * probe).sum(), list(layer.parameters()), retain_graph=True)
    # Reference: torch's own Gumbel-softmax on the same scores with the same noise (same seed).
    scores = layer.scores(query, keys)
    torch.manual_seed(2)
    relaxed = F.gumbel_softmax(scores, tau=0.7, hard=False)
    torch.manual_seed(2)
    assert torch.equal(F.gumbel_softmax(scores, tau=0.7, hard=True).argmax(-1), out.weights.argmax(-1))
    expected = torch.autograd.grad((relaxed * probe).sum(), list(layer.parameters()))
    for g, e in zip(grads, expected):
        torch.testing.assert_close(g, e)
    assert all(g.abs().sum() > 0 for g in grads)


def test_gumbel_temperature_schedule_advances_per_training_batch_and_is_checkpointed():
    layer = GumbelHardAttention(5, 4, 6, tau_start=2.0, tau_min=0.5, tau_decay=0.1).train()
    args = (torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(2), torch.ones(2, 3))
    assert layer.tau == pytest.approx(2.0)  # the first batch trains with τ_0
    for _ in range(5):
        layer.start_training_batch()  # the training loop's per-batch hook
        _, logs = layer.auxiliary_loss(*args)
    assert layer.step == 5 and logs["tau"] == pytest.approx(2.0 * math.exp(-0.4))  # τ of the 5th update
    layer.auxiliary_loss(*args)  # a loss does not move the clock
    layer.eval()
    layer.auxiliary_loss(*args)
    assert layer.step == 5
    restored = GumbelHardAttention(5, 4, 6, tau_start=2.0, tau_min=0.5, tau_decay=0.1)
    restored.load_state_dict(layer.state_dict())
    assert restored.tau == layer.tau
    restored.step.fill_(100)
    assert restored.tau == 0.5  # clamped at τ_min


def test_multi_sample_decoding_repeats_each_caption_in_training_only():
    extra = [
        "model.decoder.attention.num_samples=3",
        "model.decoder.attention.baseline=leave_one_out",
    ]
    net = build_net("hard_reinforce", 12, extra=extra).train()
    features, tokens = random_batch(net, batch=2, steps=5, vocab_size=12)
    inputs, targets = shift_inputs(tokens)
    out = net.decoder(features, inputs)
    assert out.logits.shape == (6, 4, 12) and out.aux["location_log_prob"].shape == (6, 4)
    torch.testing.assert_close(out.alphas[0:3, 0], out.alphas[0:1, 0].expand(3, -1))  # same caption, same α_1
    terms = caption_loss(out, targets, net.decoder)
    assert torch.isfinite(terms.loss) and {"reward_mean", "baseline", "attention_entropy"} <= set(terms.logs)
    assert net.eval().decoder(features, inputs).logits.shape == (2, 4, 12)


class _FakeModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Module()
        self.net.decoder = nn.Module()
        self.net.decoder.attention = nn.Linear(2, 2)
        self.logged = {}

    def log(self, name, value, **kwargs):
        self.logged[name] = value


def test_attention_grad_norm_callback_logs_the_l2_norm():
    module = _FakeModule()
    module.net.decoder.attention.weight.grad = torch.tensor([[3.0, 0.0], [0.0, 0.0]])
    module.net.decoder.attention.bias.grad = torch.tensor([0.0, 4.0])
    AttentionGradNorm().on_before_optimizer_step(None, module, None)
    torch.testing.assert_close(module.logged["train/attention_grad_norm"], torch.tensor(5.0))
    AttentionGradNorm(module="net.decoder.missing").on_before_optimizer_step(None, module, None)
    assert len(module.logged) == 1  # nothing to measure: nothing logged


@pytest.mark.parametrize("decoder", ["hard_reinforce", "hard_gumbel"])
def test_caption_cli_draws_one_hot_attention_from_a_hard_checkpoint(decoder, tmp_path, capsys):
    ckpt = train(compose_train([f"model/decoder={decoder}", *TINY, "trainer.max_epochs=1"], tmp_path))
    state = torch.load(ckpt, weights_only=True)["state_dict"]
    buffer = "baseline" if decoder == "hard_reinforce" else "step"
    assert state[f"net.decoder.attention.{buffer}"].numel() == 1  # the layer's training state is saved
    image = tmp_path / "scene.png"
    Image.fromarray(render_scene((99, 0)).image).save(image)
    capsys.readouterr()  # drop the training run's progress output
    assert main(["caption", str(image), "--checkpoint", ckpt, "--num-beams", "2", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["tokens"] and len(obj["attention"]) == len(obj["tokens"])
    for row in obj["attention"]:
        assert sorted(row) == [0.0] * 8 + [1.0]  # one selected cell per word
    overlay = tmp_path / "att.png"
    assert main(["caption", str(image), "--checkpoint", ckpt, "--overlay", str(overlay)]) == 0
    assert np.asarray(Image.open(overlay))[..., :3].std() > 5


@pytest.mark.parametrize("decoder", ["hard_reinforce", "hard_gumbel"])
@pytest.mark.parametrize("num_beams", [1, 3])
def test_expected_context_decodes_exactly_as_soft_attention_with_the_same_weights(decoder, num_beams):
    # hard_attention="expected" reads Σ α_i a_i: the soft-attention decoder with the same weights (the
    # hard layers score locations with AdditiveAttention's parameters) must give the same search.
    hard, soft = build_net(decoder, seed=3).eval(), build_net("soft", seed=4).eval()
    soft.load_state_dict(hard.state_dict(), strict=False)
    assert {n for n, _ in soft.named_parameters()} == {n for n, _ in hard.named_parameters()}
    features, _ = random_batch(hard, batch=4)
    cell = generate(hard.decoder, features, num_beams=num_beams, max_new_tokens=6)
    expected = generate(
        hard.decoder, features, num_beams=num_beams, max_new_tokens=6, hard_attention="expected"
    )
    reference = generate(soft.decoder, features, num_beams=num_beams, max_new_tokens=6)
    assert torch.equal(expected.tokens, reference.tokens)
    torch.testing.assert_close(expected.log_prob, reference.log_prob)
    torch.testing.assert_close(expected.attention, reference.attention)
    # the default still reads one cell: one-hot rows until <end>
    live = cell.attention.sum(-1) > 0  # (B, T) steps before the end
    assert torch.equal(cell.attention.amax(-1)[live], torch.ones(int(live.sum())))
    assert expected.attention.amax(-1)[expected.attention.sum(-1) > 0].max() < 1.0
    assert not hard.decoder.attention._expected  # the mode ends with the search


def test_expected_context_leaves_sampling_and_replay_choosing_cells():
    layer = ReinforceHardAttention(feature_dim=5, query_dim=4, attention_dim=6).eval()
    features, query = torch.randn(3, 6, 5), torch.randn(3, 4)
    keys = layer.precompute(features)
    with layer.expected_context():
        assert layer(query, features, keys).weights.amax(-1).max() < 1.0
        with layer.sampling():  # SCST samples cells: its location term needs them
            sampled = layer(query, features, keys)
        with layer.replay(torch.tensor([[2], [0], [5]])):
            replayed = layer(query, features, keys)
    assert torch.equal(sampled.weights.amax(-1), torch.ones(3))
    assert torch.equal(replayed.weights.argmax(-1), torch.tensor([2, 0, 5]))


def test_the_hard_attention_option_is_checked_and_reaches_the_caption_cli():
    with pytest.raises(ValueError, match=r"decoding option hard_attention='soft': expected 'cell'"):
        GenerationConfig(hard_attention="soft")
    args = build_parser().parse_args(
        ["caption", "x.png", "--checkpoint", "c.ckpt", "--hard-attention", "expected"]
    )
    assert decoding_options(args) == {"hard_attention": "expected"}
    # every decoding option is an `evaluate` override (decoding.hard_attention=expected)
    assert set(OmegaConf.load(CONF / "eval.yaml").decoding) == set(GenerationConfig().to_dict())


def test_cell_inside_an_outer_expected_block_still_reads_one_cell():
    net = build_net("hard_reinforce", seed=3).eval()
    features, _ = random_batch(net, batch=2)
    with net.decoder.attention.expected_context():
        cell = generate(net.decoder, features, max_new_tokens=4, hard_attention="cell")
        assert net.decoder.attention._expected  # the outer block's mode is back
    assert not net.decoder.attention._expected
    live = cell.attention.sum(-1) > 0
    assert torch.equal(cell.attention.amax(-1)[live], torch.ones(int(live.sum())))
