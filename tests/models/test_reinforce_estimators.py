"""The REINFORCE location estimators on toy problems with exact gradients (unbiasedness of every
credit / baseline / K, the measured variance ordering), the baselines' values and updates, and the
learned baseline in a decoder. The curriculum and entropy schedules: tests/models/test_reinforce_schedule.py."""

import math

import pytest
import torch

from captioning.losses import caption_loss
from captioning.models.attention.base import CellRewards
from captioning.models.attention.estimators import (
    leave_one_out_baseline,
    moving_average,
    reward_to_go,
    score_function_surrogate,
)
from captioning.models.attention.reinforce import ReinforceHardAttention
from captioning.models.decoders.base import shift_inputs

from support.helpers import build_net, random_batch
from support.helpers import reinforce_layer as reinforce

# Toy problem: one categorical choice s ~ softmax(θ) over 4 locations, reward f(s). The large common
# offset is what a baseline removes: it adds variance to the plain estimator but nothing to E[∇].
THETA = torch.tensor([0.3, -0.2, 0.8, 0.0])
REWARD = torch.tensor([1.0, 3.0, -2.0, 0.5]) + 10.0


def exact_gradient() -> torch.Tensor:
    theta = THETA.clone().requires_grad_(True)
    (torch.softmax(theta, -1) * REWARD).sum().backward()  # ∇θ E_s[f(s)]
    return theta.grad


def layer_estimates(layer: ReinforceHardAttention, batches: int, n: int, k: int = 1) -> torch.Tensor:
    """(batches, 4) gradient estimates of E[f] from the layer's own loss: −∇θ auxiliary_loss.

    Each batch has n captions × k samples, one step each (T = 1), no entropy bonus."""
    g = torch.Generator().manual_seed(0)
    estimates = []
    for _ in range(batches):
        theta = THETA.clone().requires_grad_(True)
        s = torch.multinomial(torch.softmax(THETA, -1), n * k, replacement=True, generator=g)  # (n·k,)
        log_prob = torch.log_softmax(theta, -1)[s].unsqueeze(1)  # (n·k, 1)
        ones = torch.ones(n * k, 1)
        loss, _ = layer.auxiliary_loss(log_prob, torch.zeros(n * k, 1), REWARD[s], ones)
        estimates.append(-torch.autograd.grad(loss, theta)[0])
    return torch.stack(estimates)


@pytest.mark.parametrize(
    "baseline,k",
    [("none", 1), ("moving_average", 1), ("length_scaled", 1), ("leave_one_out", 4)],
    ids=["none", "ma", "length", "loo"],
)
def test_reinforce_estimator_is_unbiased(baseline, k):
    """The mean of 400 batch estimates matches ∇E[f] within 4 standard errors in every coordinate."""
    est = layer_estimates(reinforce(baseline=baseline, num_samples=k), batches=400, n=64 // k, k=k)
    mean, stderr = est.mean(0), est.std(0) / math.sqrt(est.shape[0])
    assert torch.all((mean - exact_gradient()).abs() <= 4 * stderr), (mean, exact_gradient(), stderr)
    assert torch.all(stderr < 0.05)  # the tolerance is tight enough to catch a sign or scale error


def test_baselines_lower_the_variance():
    variance = {
        name: layer_estimates(reinforce(baseline=name, num_samples=k), batches=200, n=64 // k, k=k)
        .var(0)
        .sum()
        for name, k in [("none", 1), ("moving_average", 1), ("leave_one_out", 4)]
    }
    # With a reward offset of 10 the plain estimator's variance is dominated by the offset.
    assert variance["moving_average"] < 0.1 * variance["none"], variance
    assert variance["leave_one_out"] < 0.1 * variance["none"], variance


def test_surrogate_sign_reinforces_better_than_baseline_choices():
    theta = torch.zeros(3, requires_grad=True)
    log_prob = torch.log_softmax(theta, -1)[torch.tensor([0, 1])].view(2, 1)  # two captions, T = 1
    loss = score_function_surrogate(log_prob, torch.tensor([2.0, -1.0]), torch.ones(2, 1))
    (grad,) = torch.autograd.grad(loss, theta)
    stepped = torch.softmax(theta - 0.1 * grad, -1)  # one gradient-descent step on the loss
    assert stepped[0] > 1 / 3 > stepped[1]  # advantage > 0 reinforced, < 0 discouraged
    assert loss.item() == pytest.approx(-(2.0 - 1.0) * math.log(1 / 3))  # −Σ_b A_b·log p, log p = log 1/3


def test_leave_one_out_and_moving_average_values():
    reward = torch.tensor([1.0, 2.0, 6.0, 10.0, 20.0, 30.0])  # two captions × K = 3
    expected = torch.tensor([4.0, 3.5, 1.5, 25.0, 20.0, 15.0])  # mean of the other two of each caption
    torch.testing.assert_close(leave_one_out_baseline(reward, 3), expected)
    torch.testing.assert_close(moving_average(torch.tensor(2.0), torch.tensor(12.0), 0.9), torch.tensor(3.0))
    with pytest.raises(ValueError, match="K=4"):
        leave_one_out_baseline(reward, 4)


def test_baseline_updates_only_on_sampled_training_batches():
    layer = reinforce(entropy_weight=0.5)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])  # 3 target tokens
    log_prob = torch.full((2, 2), -1.0, requires_grad=True)
    entropy = torch.tensor([[0.3, 0.6], [0.9, 5.0]])  # per-token mean over real steps: 1.8 / 3 = 0.6
    _, logs = layer.auxiliary_loss(log_prob, entropy, torch.tensor([-4.0, -8.0]), mask)
    assert layer.baseline.item() == pytest.approx(-6.0) and logs["baseline"] == -6.0  # warm start: batch mean
    loss, logs = layer.auxiliary_loss(log_prob, entropy, torch.tensor([-2.0, -3.0]), mask)
    assert logs["baseline"].item() == pytest.approx(-6.0)  # the baseline from *before* this batch
    torch.testing.assert_close(layer.baseline, torch.tensor(0.9 * -6.0 + 0.1 * -2.5))
    # The REINFORCE term has value 0 and gradient −(r − b)·mask / (3 tokens), advantages (4, 3).
    torch.testing.assert_close(loss, torch.tensor(-0.5 * 0.6))
    (grad,) = torch.autograd.grad(loss, log_prob)
    torch.testing.assert_close(grad, -torch.tensor([[4.0, 4.0], [3.0, 0.0]]) / 3)
    before = layer.baseline.clone()
    layer.eval()
    val_loss, _ = layer.auxiliary_loss(log_prob, entropy, torch.tensor([-50.0, -50.0]), mask)
    assert val_loss == 0 and layer.baseline == before and layer.sampled_batches == 2
    layer.train()
    layer.sample_this_batch = False  # a semi-sampled (soft) batch: only the entropy bonus
    loss, _ = layer.auxiliary_loss(log_prob, entropy, torch.tensor([-50.0, -50.0]), mask)
    torch.testing.assert_close(loss, torch.tensor(-0.5 * 0.6))
    assert not loss.requires_grad and layer.baseline == before
    assert {"baseline", "sampled_batches"} <= set(layer.state_dict())  # checkpointed


def test_length_scaled_baseline_scales_a_per_token_average_with_caption_length():
    layer = reinforce(baseline="length_scaled")
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])  # captions of 2 and 1 target tokens
    log_prob = torch.full((2, 2), -1.0, requires_grad=True)
    layer.auxiliary_loss(log_prob, torch.zeros(2, 2), torch.tensor([-4.0, -2.0]), mask)
    assert layer.baseline.item() == pytest.approx(-2.0)  # warm start: −6 nats over 3 tokens
    loss, logs = layer.auxiliary_loss(log_prob, torch.zeros(2, 2), torch.tensor([-6.0, -1.0]), mask)
    assert logs["baseline"].item() == pytest.approx(-3.0)  # mean of (−2·2, −2·1)
    (grad,) = torch.autograd.grad(loss, log_prob)  # advantages (−6 + 4, −1 + 2) = (−2, 1)
    torch.testing.assert_close(grad, -torch.tensor([[-2.0, -2.0], [1.0, 0.0]]) / 3)
    torch.testing.assert_close(layer.baseline, torch.tensor(0.9 * -2.0 + 0.1 * -7.0 / 3))


# Toy problem with T = 3 steps: location s_t ~ softmax(θ_t), word t's log-likelihood f_t(s_1..s_t) depends
# only on the locations up to t (as in the decoder). The reward is Σ_t f_t; E[∇] is computed exactly.
THETA3 = torch.tensor([[0.3, -0.2, 0.8, 0.0], [0.1, 0.4, -0.5, 0.2], [-0.3, 0.0, 0.6, 0.1]])
F_STEP = [
    torch.tensor([1.0, 3.0, -2.0, 0.5]) - 6,
    torch.tensor([0.5, -1.0, 2.0, 0.0]) - 6,
    torch.tensor([-1.0, 0.5, 1.5, 2.0]) - 6,
]  # fmt: skip  (large common offsets: what baselines remove)


def f_tokens(s: torch.Tensor) -> torch.Tensor:
    """(N, 3) locations -> (N, 3) per-step log-likelihoods; word t depends on s_t and s_{t-1}."""
    f1 = F_STEP[0][s[:, 0]]
    f2 = F_STEP[1][s[:, 1]] + 0.5 * F_STEP[0][s[:, 0]]
    f3 = F_STEP[2][s[:, 2]] - 0.3 * F_STEP[1][s[:, 1]]
    return torch.stack([f1, f2, f3], 1)


def exact_gradient_3() -> torch.Tensor:
    theta = THETA3.clone().requires_grad_(True)
    p = torch.softmax(theta, -1)  # (3, 4)
    grid = torch.cartesian_prod(torch.arange(4), torch.arange(4), torch.arange(4))  # (64, 3) every s
    prob = p[0, grid[:, 0]] * p[1, grid[:, 1]] * p[2, grid[:, 2]]
    (prob * f_tokens(grid).sum(1)).sum().backward()
    return theta.grad


def sample_locations_3(n: int, g: torch.Generator) -> torch.Tensor:
    """(n, 3) locations s_t ~ softmax(THETA3[t]), independent over steps."""
    return torch.stack(
        [torch.multinomial(torch.softmax(THETA3[t], -1), n, True, generator=g) for t in range(3)], 1
    )


def estimates_3(layer, batches: int, n: int, k: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(batches):
        theta = THETA3.clone().requires_grad_(True)
        s = sample_locations_3(n * k, g)
        log_prob = torch.log_softmax(theta, -1).gather(1, s.t()).t()  # (N, 3) log α_{t, s_t}
        loss, _ = layer.auxiliary_loss(log_prob, torch.zeros(n * k, 3), f_tokens(s), torch.ones(n * k, 3))
        out.append(-torch.autograd.grad(loss, theta)[0] * 3)  # the layer averages per token (3 per caption)
    return torch.stack(out)


@pytest.mark.parametrize(
    "credit,baseline,k",
    [
        ("caption", "moving_average", 1),
        ("remaining", "none", 1),
        ("remaining", "moving_average", 1),
        ("remaining", "leave_one_out", 4),
    ],  # fmt: skip
    ids=["caption-ma", "remaining-none", "remaining-ma", "remaining-loo"],
)
def test_reward_to_go_estimators_are_unbiased_on_a_three_step_problem(credit, baseline, k):
    layer = reinforce(baseline=baseline, num_samples=k, credit=credit)
    est = estimates_3(layer, batches=300, n=64 // k, k=k)
    mean, stderr = est.mean(0), est.std(0) / math.sqrt(est.shape[0])
    assert torch.all((mean - exact_gradient_3()).abs() <= 4 * stderr), (mean, exact_gradient_3(), stderr)


def value_table(s: torch.Tensor) -> torch.Tensor:
    """(N, 3) locations -> (N, 3) a state-dependent baseline b_t(s_<t) as a decoder state could carry it:
    any function of the earlier locations (here the earlier words' log-likelihoods), never of s_t."""
    f = f_tokens(s)
    return torch.stack([torch.full_like(f[:, 0], -17.0), f[:, 0] - 11.0, f[:, :2].sum(1) - 5.0], 1)


@pytest.mark.parametrize("credit", ["caption", "remaining"])
def test_a_learned_state_dependent_baseline_is_unbiased_and_fits_its_target(credit):
    layer = reinforce(baseline="learned", credit=credit)
    g = torch.Generator().manual_seed(3)
    out = []
    for _ in range(300):
        theta = THETA3.clone().requires_grad_(True)
        s = torch.stack(
            [torch.multinomial(torch.softmax(THETA3[t], -1), 64, True, generator=g) for t in range(3)], 1
        )
        log_prob = torch.log_softmax(theta, -1).gather(1, s.t()).t()  # (N, 3)
        loss, _ = layer.auxiliary_loss(
            log_prob, torch.zeros(64, 3), f_tokens(s), torch.ones(64, 3), value_table(s)
        )
        out.append(-torch.autograd.grad(loss, theta)[0] * 3)
    est = torch.stack(out)
    mean, stderr = est.mean(0), est.std(0) / math.sqrt(est.shape[0])
    assert torch.all((mean - exact_gradient_3()).abs() <= 4 * stderr), (mean, exact_gradient_3(), stderr)
    # The value head's term: gradient value_weight · 2(b − target)/tokens on b, and a loss value of 0.
    s = torch.stack(
        [torch.multinomial(torch.softmax(THETA3[t], -1), 8, True, generator=g) for t in range(3)], 1
    )
    value = value_table(s).requires_grad_(True)
    loss, logs = layer.auxiliary_loss(
        torch.zeros(8, 3), torch.zeros(8, 3), f_tokens(s), torch.ones(8, 3), value
    )
    target = (
        reward_to_go(f_tokens(s), torch.ones(8, 3))
        if credit == "remaining"
        else f_tokens(s).sum(1, keepdim=True)
    )
    (grad,) = torch.autograd.grad(loss, value)
    torch.testing.assert_close(grad, 2 * (value.detach() - target) / 24)
    assert loss.item() == 0.0 and logs["value_loss"] == pytest.approx(((value - target) ** 2).mean().item())


def test_the_learned_baseline_learns_in_a_decoder_and_only_the_value_head_sees_its_fit():
    layer = ReinforceHardAttention(
        feature_dim=5, query_dim=4, attention_dim=6, baseline="learned", semi_sampling_p=0.0
    )
    layer.train().start_training_batch()
    features, query = torch.randn(3, 7, 5), torch.randn(3, 4, requires_grad=True)
    out = layer(query, features, layer.precompute(features))
    torch.testing.assert_close(out.value, layer.value_head(query).squeeze(-1))
    _, logs = layer.auxiliary_loss(
        out.log_prob.unsqueeze(1),
        out.entropy.unsqueeze(1),
        torch.full((3, 1), -4.0),
        torch.ones(3, 1),
        out.value.unsqueeze(1),
    )
    fit = logs["value_loss"]
    assert fit > 0 and "value_head.weight" in layer.state_dict()
    assert (
        "value_head.weight" not in reinforce().state_dict()
    )  # other baselines: the same state dict as before
    (gq,) = torch.autograd.grad(out.value.sum(), query, allow_unused=True)
    assert gq is None or torch.count_nonzero(gq) == 0  # the head reads a detached state


def test_measured_variance_ordering_of_the_estimators():
    """Per-step credit removes the earlier words' noise; a baseline removes the offset; K samples more."""
    var = {
        name: estimates_3(reinforce(baseline=b, num_samples=k, credit=c), batches=200, n=64 // k, k=k)
        .var(0)
        .sum()
        .item()
        for name, c, b, k in [
            ("caption-none", "caption", "none", 1),
            ("remaining-none", "remaining", "none", 1),
            ("caption-ma", "caption", "moving_average", 1),
            ("remaining-ma", "remaining", "moving_average", 1),
            ("remaining-loo", "remaining", "leave_one_out", 4),
        ]  # fmt: skip
    }
    assert var["remaining-none"] < var["caption-none"], var
    assert var["remaining-ma"] < var["caption-ma"] < var["caption-none"], var
    assert var["remaining-loo"] < var["remaining-none"], var


def cell_rewards_3(s: torch.Tensor) -> torch.Tensor:
    """(N, 3) locations -> (N, 3, 4) r_t(i): f_tokens with s_t replaced by every cell i, s_{<t} kept."""
    n = s.shape[0]
    return torch.stack(
        [
            F_STEP[0].expand(n, 4),
            F_STEP[1].expand(n, 4) + 0.5 * F_STEP[0][s[:, 0]].unsqueeze(1),
            F_STEP[2].expand(n, 4) - 0.3 * F_STEP[1][s[:, 1]].unsqueeze(1),
        ],
        1,
    )


def exact_step_estimates(layer, batches: int, n: int, k: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(2)
    out = []
    for _ in range(batches):
        theta = THETA3.clone().requires_grad_(True)
        s = sample_locations_3(n * k, g)
        log_alpha = torch.log_softmax(theta, -1)  # (3, 4)
        log_prob = log_alpha.gather(1, s.t()).t()  # (N, 3)
        alphas = log_alpha.exp().expand(n * k, 3, 4)  # (N, 3, 4) with the graph
        index = layer.cells_to_rescore(alphas, s)  # (N, 3, C) what the decoder would rerun
        cells = CellRewards(index, cell_rewards_3(s).gather(2, index))
        loss, _ = layer.auxiliary_loss(
            log_prob, torch.zeros(n * k, 3), f_tokens(s), torch.ones(n * k, 3), alphas=alphas, cells=cells
        )
        out.append(-torch.autograd.grad(loss, theta)[0] * 3)
    return torch.stack(out)


def test_cell_rewards_of_the_toy_agree_with_its_rewards_at_the_sampled_cells():
    s = torch.randint(0, 4, (16, 3))
    picked = cell_rewards_3(s).gather(2, s.unsqueeze(2)).squeeze(2)  # (N, 3) r_t(s_t)
    torch.testing.assert_close(picked, f_tokens(s))


@pytest.mark.parametrize(
    "baseline,k,cells",
    [("none", 1, 0), ("moving_average", 1, 0), ("leave_one_out", 4, 0), ("leave_one_out", 4, 2)],
    ids=["none-all", "ma-all", "loo-all", "loo-top2"],
)
def test_exact_step_credit_is_unbiased_and_has_the_lowest_variance(baseline, k, cells):
    """All 4 cells summed exactly, or the top 2 and the rest by the sample: unbiased either way."""
    layer = reinforce(baseline=baseline, num_samples=k, credit="exact_step", exact_cells=cells)
    est = exact_step_estimates(layer, batches=300, n=64 // k, k=k)
    mean, stderr = est.mean(0), est.std(0) / math.sqrt(est.shape[0])
    # The last step has no later words: its gradient is exact in every batch (stderr ~0, float error only).
    assert torch.all((mean - exact_gradient_3()).abs() <= 4 * stderr + 1e-5), (mean, exact_gradient_3())
    if cells == 0:
        assert est[:, 2].std(0).max() < 1e-5
    sampled = estimates_3(reinforce(baseline=baseline, num_samples=k, credit="remaining"), 300, 64 // k, k)
    assert est.var(0).sum() < sampled.var(0).sum(), (est.var(0).sum(), sampled.var(0).sum())


def test_exact_step_credit_needs_the_cell_rewards():
    layer = reinforce(credit="exact_step", baseline="none")
    with pytest.raises(ValueError, match="exact_step.*rewards"):
        layer.auxiliary_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3))


def test_decoder_cell_log_likelihoods_rescore_the_sampled_cell_exactly():
    """r_t(s_t) from the rerun equals the teacher-forced log p(y_t) of the sampled path; other cells differ;
    and a loss on it trains the attention scores."""
    extra = [
        "model.decoder.attention.credit=exact_step",
        "model.decoder.attention.baseline=leave_one_out",
        "model.decoder.attention.semi_sampling_p=0.0",
        "model.decoder.attention.semi_sampling_final=null",
        "model.decoder.attention.entropy_weight_final=null",
        "model.decoder.attention.anneal_steps=0",
        "model.decoder.dropout=0.0",
    ]
    net = build_net("hard_reinforce", 12, extra=extra).train()
    net.decoder.start_training_batch()
    assert net.decoder.attention.needs_cell_rewards
    features, tokens = random_batch(net, batch=3, steps=6, vocab_size=12)
    inputs, targets = shift_inputs(tokens)
    out = net.decoder(features, inputs)
    rows = out.logits.shape[0]  # B·K
    targets_k = targets.repeat_interleave(rows // targets.shape[0], 0)
    chosen = out.attention.argmax(-1)  # (B·K, T) the sampled cells (one-hot weights)
    every = torch.arange(features.shape[1]).expand(rows, targets.shape[1], -1)  # (B·K, T, L)
    index = torch.cat([every, chosen.unsqueeze(-1)], -1)  # every cell, then the sampled one
    cell = net.decoder.cell_log_likelihoods(out.aux, targets_k, index)  # (B·K, T, L + 1)
    assert cell.shape == (rows, targets.shape[1], features.shape[1] + 1)
    token_logp = torch.log_softmax(out.logits, -1).gather(2, targets_k.unsqueeze(2)).squeeze(2)
    torch.testing.assert_close(cell[..., -1], token_logp, atol=1e-5, rtol=0)  # the sampled path's own
    torch.testing.assert_close(cell[..., :-1].gather(2, chosen.unsqueeze(2)).squeeze(2), token_logp)
    assert cell.std(-1).min() > 0  # the cell matters to the word
    top = net.decoder.attention.cells_to_rescore(out.alphas, chosen)  # the default: 16 cells (of L) + s_t
    assert top.shape == (rows, targets.shape[1], min(16, features.shape[1]) + 1)
    torch.testing.assert_close(net.decoder.cell_log_likelihoods(out.aux, targets_k, top), cell.gather(2, top))
    terms = caption_loss(out, targets, net.decoder)
    terms.loss.backward()
    assert net.decoder.attention.score.weight.grad.abs().sum() > 0
    net.decoder.eval()
    assert not net.decoder.attention.needs_cell_rewards and "cell_h" not in net.decoder(features, inputs).aux
