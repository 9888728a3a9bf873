"""Score-function (REINFORCE) gradient estimation for stochastic hard attention, as pure tensor math.

Sign convention, derived once here (Xu et al. §4.1, eq. 10-12). With locations s ~ p(s | a) = Π_t α_{t,s_t}
the model maximises the variational lower bound

    L_s = Σ_s p(s | a) log p(y | s, a)  ≤  log p(y | a)                                   (eq. 10)

    ∂L_s/∂W = Σ_s p(s | a) [ ∂log p(y | s, a)/∂W  +  log p(y | s, a) · ∂log p(s | a)/∂W ]   (eq. 11)
            ≈ 1/N Σ_n [ ∂log p(y | s̃ⁿ, a)/∂W  +  (r_n − b) · ∂log p(s̃ⁿ | a)/∂W ],  r_n = log p(y | s̃ⁿ, a)

The baseline b may be any quantity that does not depend on s̃ⁿ: E[(r − b) ∂log p(s̃)] = E[r ∂log p(s̃)]
because E[∂log p(s̃)] = Σ_s ∂p(s) = ∂1 = 0, so the estimate stays unbiased while its variance drops.

We *minimise* a loss. The cross-entropy −log p(y | s̃, a) (s̃ held fixed) already supplies the first term
with the right sign. The second term comes from the surrogate

    surrogate = −(r − b) · log p(s̃ | a) = −(r − b) · Σ_t log α_{t, s̃_t},    r and b detached (constants)

whose gradient is −(r − b) ∂log p(s̃)/∂W: exactly the negative of eq. 12's second term, so gradient
descent on it ascends L_s. Sanity check: a caption that went better than usual (r > b) makes the
surrogate decrease as log p(s̃) increases, i.e. descent makes the locations that produced it more likely.
An entropy *bonus* λ_H·H is maximised, so it enters the loss as −λ_H·H.
"""

from __future__ import annotations

from torch import Tensor

from captioning.models.attention.base import CellRewards


def score_function_surrogate(log_prob: Tensor, advantage: Tensor, token_mask: Tensor) -> Tensor:
    """−Σ advantage · log p(s_t) over captions and steps, padded steps excluded (summed, not averaged).

    ``log_prob`` (B, T) log α_{t, s_t} of the sampled locations, ``token_mask`` (B, T) 1 on real steps,
    ``advantage`` (B,) one r − b per caption (every location shares it), or (B, T) one per step (the
    credit of location t, e.g. the reward of the words from t on); detached here, so no gradient can leak
    through the reward or the baseline.
    """
    if log_prob.shape != token_mask.shape or advantage.shape not in (log_prob.shape[:1], log_prob.shape):
        raise ValueError(
            f"score_function_surrogate: log_prob {tuple(log_prob.shape)} and token_mask "
            f"{tuple(token_mask.shape)} must both be (B, T) and advantage {tuple(advantage.shape)} (B,) or (B, T)"
        )
    per_step = advantage.detach() if advantage.dim() == 2 else advantage.detach().unsqueeze(1)  # (B, T|1)
    return -(per_step * log_prob * token_mask).sum()


def reward_to_go(token_reward: Tensor, token_mask: Tensor) -> Tensor:
    """(B, T) -> (B, T): r_t = Σ_{u ≥ t} log p(y_u), the log-likelihood of the words from step t on.

    The location chosen at step t can change only the words from t on (the state before t does not
    depend on it), so E[∂log p(s_t) · Σ_{u<t} log p(y_u)] = 0 given the earlier locations, and crediting
    s_t with the remaining words alone keeps eq. 11's expectation while dropping that term's variance."""
    masked = token_reward * token_mask
    return masked.flip(1).cumsum(1).flip(1) * token_mask  # suffix sums, 0 on padded steps


def leave_one_out_baseline(reward: Tensor, num_samples: int) -> Tensor:
    """For K samples per caption, each sample's baseline is the mean reward of the *other* K − 1.

    ``reward`` (B·K,) with the K samples of a caption in adjacent rows -> (B·K,). Sample k's baseline is
    independent of sample k itself, which is what keeps the estimator unbiased.
    """
    if num_samples < 2:
        raise ValueError(f"leave_one_out_baseline needs num_samples >= 2, got {num_samples}")
    if reward.dim() != 1 or reward.shape[0] % num_samples:
        raise ValueError(
            f"leave_one_out_baseline: reward must be (B·K,) with K={num_samples}, got {tuple(reward.shape)}"
        )
    grouped = reward.view(-1, num_samples)  # (B, K)
    others = (grouped.sum(1, keepdim=True) - grouped) / (num_samples - 1)  # (B, K)
    return others.reshape(-1)  # (B·K,)


def moving_average(baseline: Tensor, reward_mean: Tensor, decay: float) -> Tensor:
    """b ← decay·b + (1 − decay)·mean reward (the authors' code uses decay = 0.9)."""
    return decay * baseline + (1.0 - decay) * reward_mean


def exact_step_surrogate(alphas: Tensor, log_prob: Tensor, cells: CellRewards, token_mask: Tensor) -> Tensor:
    """−Σ_{b,t} [word t's part of location t's score-function term, summed exactly over the rescored cells].

    Split location t's credit Σ_{u≥t} log p(y_u) (``reward_to_go``) into its own word r_t(s_t) =
    log p(y_t | s_t, s_{<t}) and the later words. Given s_{<t}, the first part's term has the closed form

        E_{s_t}[ ∂log α_{t,s_t} · r_t(s_t) ] = Σ_i α_{t,i} ∂log α_{t,i} r_t(i) = Σ_i ∂α_{t,i} · r_t(i),

    computable wherever r_t(i) is known (the decoder reruns step t with a_i in place of the sampled cell:
    ``LSTMDecoder.cell_log_likelihoods``). Rerunning all L cells costs L LSTM steps, so the sum runs
    exactly over a set S_t of likely cells (the top α, chosen before s_t is drawn) and the rest by the
    one sample ("sum and sample", Liu et al. 2019, "Rao-Blackwellized stochastic gradients for discrete
    distributions"):

        Σ_{i∈S} ∂α_i (r_i − c)  +  1[s_t ∉ S] · ∂log α_{s_t} (r_{s_t} − c),     E[·] = Σ_i ∂α_i r_i

    because E[1[s ∉ S] ∂log α_s (r_s − c)] = Σ_{i∉S} ∂α_i (r_i − c) and Σ_i ∂α_i c = 0 for any c that
    does not depend on s_t (here the α-weighted mean of r over S). With S every cell the sampling noise
    of s_t on its own word is gone entirely (Rao-Blackwellisation); the later words stay on REINFORCE.

    ``alphas`` (B, T, L) with their graph, ``log_prob`` (B, T) log α_{t,s_t} with its graph, ``cells``:
    ``index``/``reward`` (B, T, C), the C − 1 cells of S then the sampled one. Summed over captions and
    steps like ``score_function_surrogate``.
    """
    index, reward = cells.index, cells.reward
    if (
        alphas.shape[:2] != token_mask.shape
        or index.shape != reward.shape
        or index.shape[:2] != log_prob.shape
    ):
        raise ValueError(
            f"exact_step_surrogate: alphas {tuple(alphas.shape)} (B, T, L), log_prob {tuple(log_prob.shape)} "
            f"and token_mask {tuple(token_mask.shape)} (B, T), cells {tuple(index.shape)} (B, T, C)"
        )
    top_index, top_reward, _, chosen_reward = cells.split()  # (B, T, C−1) the set S; (B, T) r_t(s_t)
    top_reward, chosen_reward = top_reward.detach(), chosen_reward.detach()
    top_alpha = alphas.gather(-1, top_index)  # (B, T, C−1) with the graph
    weight = top_alpha.detach()
    c = (weight * top_reward).sum(-1) / weight.sum(-1).clamp_min(1e-12)  # (B, T) does not depend on s_t
    exact = (top_alpha * (top_reward - c.unsqueeze(-1))).sum(-1)  # (B, T) Σ_{i∈S} α_i (r_i − c)
    outside = (~cells.sampled_in_set()).to(log_prob.dtype)  # (B, T) 1[s_t ∉ S]
    sampled = outside * log_prob * (chosen_reward - c)  # (B, T)
    return -((exact + sampled) * token_mask).sum()


def exact_step_pathwise(alphas: Tensor, cells: CellRewards, token_mask: Tensor) -> Tensor:
    """−Σ_{b,t} [Σ_{i∈S} α_{t,i} r_t(i) − 1[s_t ∈ S] r_t(s_t)]: the cross-entropy's word-t gradient with the
    sampled cell's part replaced by its expectation over s_t, for the decoder and the encoder.

    The cross-entropy differentiates log p(y_t | s_t, ...) at the one sampled cell: an estimate of
    E_{s_t}[∂r_t(s_t)] = Σ_i α_{t,i} ∂r_t(i). For any differentiable f(i) (here r_t(i) rerun from the
    detached state before step t, so only the step's own weights and the cells' features carry
    gradients), E_{s_t}[Σ_{i∈S} α_i ∂f(i) + 1[s_t ∉ S] ∂f(s_t) − ∂f(s_t)] = 0, so adding this term (α
    detached) keeps the gradient's expectation and swaps the sampled cell's local gradient for the
    α-weighted one over S, plus the sample outside S: every likely cell's features learn from the word,
    as under soft attention, while the forward pass stays hard. ``cells.reward`` must carry its graph.
    """
    top_index, top_reward, _, chosen_reward = cells.split()  # (B, T, C−1), (B, T)
    weight = alphas.detach().gather(-1, top_index)  # (B, T, C−1)
    inside = cells.sampled_in_set().to(chosen_reward.dtype)  # (B, T) 1[s_t ∈ S]
    correction = (weight * top_reward).sum(-1) - inside * chosen_reward  # (B, T), zero in expectation
    return -(correction * token_mask).sum()
