"""scripts/estimator_variance.py: its per-estimator gradients agree in expectation and differ in variance."""

from __future__ import annotations

import torch

from experiments import estimator_variance as ev

from support.corpus import build_module


def reinforce_decoder() -> tuple:
    """(decoder, its attention, features (4, 16, D), tokens (4, 5)) of a small REINFORCE decoder in training
    mode with dropout, the entropy bonus and semi-sampling off: only the sampled locations vary."""
    decoder = build_module(["a", "red", "circle", "blue"], ["model/decoder=hard_reinforce"]).net.decoder
    for module in decoder.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    decoder.train()
    attention = decoder.attention
    attention.entropy_weight, attention.sample_this_batch = 0.0, True
    attention.semi_sampling_p, attention.semi_sampling_final = 0.0, None
    torch.manual_seed(0)
    features = torch.randn(4, 16, decoder.feature_dim) * 3  # (B, L, D): cells that differ
    tokens = torch.tensor([[1, 4, 5, 6, 2], [1, 4, 7, 6, 2], [1, 5, 6, 2, 0], [1, 4, 4, 7, 2]])  # <start>=1
    return decoder, attention, features, tokens


def test_caption_specific_baselines_keep_the_mean_and_cut_the_variance() -> None:
    decoder, attention, features, tokens = reinforce_decoder()
    params = [p for p in attention.parameters() if p.requires_grad]

    def draws(baseline: str, k: int, n: int = 300) -> torch.Tensor:
        attention.baseline_kind, attention.num_samples, attention.credit = baseline, k, "caption"
        return torch.stack([ev.gradient(decoder, attention, features, tokens, params) for _ in range(n)])

    plain, loo = draws("none", 1), draws("leave_one_out", 2)
    # unbiased: the same expected gradient (within the Monte Carlo error of the noisier one)
    error = (plain.std(0) / plain.shape[0] ** 0.5).norm()
    assert (plain.mean(0) - loo.mean(0)).norm() < 4 * error
    # a baseline per caption removes the reward's dependence on the words: far lower variance, even
    # per sample of compute (K = 2 samples average two draws: x2)
    assert 2 * loo.var(0).sum() < 0.2 * plain.var(0).sum()


def test_exact_word_credit_keeps_the_mean_and_cuts_the_variance_on_the_real_decoder() -> None:
    """credit=exact_step (word t summed over the cells, here all 16 or the top 4 + the sample) against
    credit=remaining, the same leave-one-out baseline: one expected gradient, less variance."""
    decoder, attention, features, tokens = reinforce_decoder()
    params = [p for p in attention.parameters() if p.requires_grad]

    def draws(credit: str, cells: int = 0, n: int = 300) -> torch.Tensor:
        attention.baseline_kind, attention.num_samples, attention.credit = "leave_one_out", 2, credit
        attention.exact_cells = cells
        return torch.stack([ev.gradient(decoder, attention, features, tokens, params) for _ in range(n)])

    sampled, exact, top4 = draws("remaining"), draws("exact_step"), draws("exact_step", cells=4)
    error = (sampled.std(0) / sampled.shape[0] ** 0.5).norm()
    assert (sampled.mean(0) - exact.mean(0)).norm() < 4 * error
    assert (sampled.mean(0) - top4.mean(0)).norm() < 4 * error
    assert exact.var(0).sum() < top4.var(0).sum() < sampled.var(0).sum()


def test_exact_step_keeps_the_whole_gradient_and_cuts_its_variance_for_the_encoder() -> None:
    """The total training gradient with respect to the grid (what the encoder learns from), with the word-t
    terms summed over the cells (score function and pathwise) against credit=remaining: equal in
    expectation, lower in variance."""
    from captioning.losses import caption_loss

    decoder, attention, features, tokens = reinforce_decoder()
    attention.baseline_kind, attention.num_samples, attention.exact_cells = "leave_one_out", 2, 0
    features.requires_grad_(True)

    def draws(credit: str, n: int = 300) -> torch.Tensor:
        attention.credit = credit
        out = []
        for _ in range(n):
            loss = caption_loss(decoder(features, tokens[:, :-1]), tokens[:, 1:], decoder).loss
            out.append(torch.autograd.grad(loss, features)[0].flatten())
        return torch.stack(out)

    sampled, exact = draws("remaining"), draws("exact_step")
    error = (sampled.std(0) / sampled.shape[0] ** 0.5).norm()
    assert (sampled.mean(0) - exact.mean(0)).norm() < 4 * error
    assert exact.var(0).sum() < 0.5 * sampled.var(0).sum()
