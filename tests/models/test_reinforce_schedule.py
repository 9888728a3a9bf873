"""ReinforceHardAttention's schedules over training batches: the semi-sampling coin, the soft-to-hard
curriculum, the entropy bonus's fade (and its delay) or its end as a penalty, and their checkpointing."""

import pytest
import torch

from support.helpers import reinforce_layer as reinforce

# p 1 -> 0 and λ_H 0.01 -> 0 over anneal_steps batches (each test sets its own window)
CURRICULUM = dict(semi_sampling_p=1.0, semi_sampling_final=0.0, entropy_weight=0.01, entropy_weight_final=0.0)


def over_batches(layer, batches: int) -> tuple[list[float], list[float], list[bool]]:
    """The soft-batch probability, λ_H and the coin (True: sampled) of each of ``batches`` training batches."""
    probabilities, weights, coins = [], [], []
    for _ in range(batches):
        layer.start_training_batch()
        probabilities.append(layer.soft_batch_probability)
        weights.append(layer.entropy_weight)
        coins.append(layer.sample_this_batch)
    return probabilities, weights, coins


def test_semi_sampling_coin_is_per_batch_and_selects_soft_or_hard_context():
    torch.manual_seed(0)
    features, query = torch.randn(3, 7, 5), torch.randn(3, 4)
    soft = reinforce(semi_sampling_p=1.0)
    soft.start_training_batch()  # the training loop's per-batch hook flips the coin
    out = soft(query, features, soft.precompute(features))
    torch.testing.assert_close(out.weights, out.alphas)
    torch.testing.assert_close(out.context, torch.einsum("bl,bld->bd", out.alphas, features))
    hard = reinforce(semi_sampling_p=0.0)
    hard.start_training_batch()
    out = hard(query, features, hard.precompute(features))
    index = out.weights.argmax(-1)
    assert torch.equal(out.weights.sum(-1), torch.ones(3)) and torch.equal(
        out.weights.max(-1).values, torch.ones(3)
    )
    assert torch.equal(out.context, features[torch.arange(3), index])
    torch.testing.assert_close(out.log_prob, out.alphas[torch.arange(3), index].log())
    half = reinforce(semi_sampling_p=0.5)
    flips = []
    for _ in range(400):
        half.start_training_batch()
        flips.append(half.sample_this_batch)
    coin = half.sample_this_batch
    for _ in range(20):  # neither precompute nor forward flips it: only the explicit hook does
        half(query, features, half.precompute(features))
    assert half.sample_this_batch == coin
    assert 0.4 < sum(flips) / len(flips) < 0.6  # 4 standard deviations of Binomial(400, 0.5) / 400


def test_negative_final_entropy_weight_ends_the_curriculum_with_a_penalty_that_sharpens_attention():
    layer = reinforce(entropy_weight=0.01, entropy_weight_final=-0.5, anneal_steps=2, semi_sampling_p=1.0)
    layer.train()
    weights = []
    for _ in range(4):
        layer.start_training_batch()
        weights.append(layer.entropy_weight)
    assert weights == pytest.approx([0.01, -0.245, -0.5, -0.5])
    scores = torch.tensor([[0.3, -0.2, 0.8, 0.0]], requires_grad=True)  # (B=1, L=4)
    alphas = torch.softmax(scores, -1)
    entropy = -(alphas * alphas.log()).sum(-1, keepdim=True)  # (B, T=1)
    ones = torch.ones(1, 1)
    loss, _ = layer.auxiliary_loss(torch.zeros(1, 1), entropy, torch.zeros(1), ones)  # a soft batch
    assert loss.item() == pytest.approx(0.5 * entropy.item())  # −λ_H·H with λ_H = −0.5
    loss.backward()
    sharper = torch.softmax(scores.detach() - 0.1 * scores.grad, -1)  # one gradient-descent step
    assert -(sharper * sharper.log()).sum() < entropy.item()
    with pytest.raises(ValueError, match="entropy_weight_final=nan must be a finite number"):
        reinforce(entropy_weight_final=float("nan"), anneal_steps=2)


def test_entropy_anneal_start_holds_the_bonus_then_fades_it_while_the_curriculum_keeps_its_own_window():
    layer = reinforce(**CURRICULUM, anneal_steps=2, entropy_anneal_start=3)
    probabilities, weights, _ = over_batches(layer, 7)
    assert probabilities == pytest.approx([1.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0])  # batches 1-3: the curriculum
    assert weights == pytest.approx(
        [0.01, 0.01, 0.01, 0.01, 0.005, 0.0, 0.0]
    )  # held 3 batches, then 2 to fade
    restored = reinforce(
        entropy_weight=0.01, entropy_weight_final=0.0, anneal_steps=2, entropy_anneal_start=3
    )
    restored.load_state_dict(layer.state_dict())  # the step counter is checkpointed, so a resumed run agrees
    assert restored.entropy_weight == 0.0
    with pytest.raises(ValueError, match="entropy_anneal_start=-1 must be >= 0"):
        reinforce(entropy_weight_final=0.0, anneal_steps=2, entropy_anneal_start=-1)


def test_soft_to_hard_curriculum_anneals_per_training_batch_and_is_checkpointed():
    schedule = dict(CURRICULUM, anneal_steps=4)
    layer = reinforce(**schedule)
    probabilities, weights, coins = over_batches(layer, 6)
    assert probabilities == pytest.approx([1.0, 0.75, 0.5, 0.25, 0.0, 0.0])  # batch 1 at the start value
    assert weights == pytest.approx([0.01, 0.0075, 0.005, 0.0025, 0.0, 0.0])
    assert coins[0] is False and coins[-2:] == [True, True]  # p = 1: soft for sure; p = 0: sampled for sure
    restored = reinforce(**schedule)
    restored.load_state_dict(layer.state_dict())
    assert restored.step == 6 and restored.soft_batch_probability == 0.0
    legacy = {k: v for k, v in layer.state_dict().items() if k != "step"}  # written before the anneal
    restored.load_state_dict(legacy)
    assert restored.step == 0 and restored.soft_batch_probability == 1.0
    with pytest.raises(ValueError, match="anneal_steps > 0"):
        reinforce(semi_sampling_final=0.0)
    constant = reinforce(semi_sampling_p=0.3)
    for _ in range(3):
        constant.start_training_batch()
    assert constant.soft_batch_probability == 0.3 and constant.entropy_weight == constant.entropy_weight_start


def test_the_default_bonus_holds_through_the_comparison_recipe_and_fades_before_a_full_run_ends():
    from hydra.utils import instantiate

    from support import compose_train

    cfg = compose_train(["model/decoder=hard_reinforce"]).model.decoder.attention
    layer = instantiate(cfg)(feature_dim=8, query_dim=8)  # _partial_: the decoder supplies the sizes
    _, weights, _ = over_batches(layer, 1500)
    assert set(weights[:1001]) == {0.002}  # batches 1-1,001: the 1,000-step recipe sees a constant λ_H
    assert weights[1225] == pytest.approx(0.001, abs=1e-5)  # half-way through the 450-batch fade
    assert weights[1450:] == [0.0] * 50  # gone by batch 1,451, well before an 8-epoch run's 3,752
    flickr = compose_train(["experiment=flickr8k_hard_reinforce"]).model.decoder.attention
    assert flickr.entropy_weight_final is None  # the zoo's recipe keeps its constant bonus
