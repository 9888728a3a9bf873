"""Hard attention trained by REINFORCE (Xu et al. §4.1, eq. 12), with the baselines, credit
assignments and soft-to-hard curriculum that make its location policy learn (the class docstring
derives each; ``estimators.py`` holds the estimators as free functions).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from captioning.models.attention.base import (
    AttentionOutput,
    CellRewards,
    attend,
    entropy_of,
    per_token_mean,
)
from captioning.models.attention.estimators import (
    exact_step_pathwise,
    exact_step_surrogate,
    leave_one_out_baseline,
    moving_average,
    reward_to_go,
    score_function_surrogate,
)
from captioning.models.attention.hard import HardAttention
from captioning.models.registry import register

BASELINES = ("none", "moving_average", "length_scaled", "leave_one_out", "learned")
CREDITS = ("caption", "remaining", "exact_step")


@register
class ReinforceHardAttention(HardAttention):
    """s_t ~ Categorical(α_t), trained with REINFORCE (Xu et al. eq. 12) plus an entropy bonus.

    Loss added to the cross-entropy (minimised, per target token like the cross-entropy):
        [ −Σ_b (r_b − b_b) · Σ_t log α_{t, s_t}  −  λ_H · Σ_{b,t} H[α_t] ] / (number of target tokens)
    with r_b = log p(y_b | s, a) the caption log-likelihood supplied by the decoder. The REINFORCE term
    contributes its gradient only: its value is subtracted out so the logged loss stays interpretable.

    ``baseline``: "moving_average" (b ← decay·b + (1 − decay)·mean r, as in the authors' code; the first
    sampled batch sets b to its mean instead of starting from 0, which would make the first few dozen
    advantages pure baseline lag), "length_scaled" (b_b = m·n_b with n_b the caption's target tokens and
    m the same moving average of the reward *per token*: r = Σ_t log p(y_t) scales with the caption's
    length, which a single b cannot follow; n_b is fixed by the target, not by s, so this stays
    unbiased), "leave_one_out" (K = ``num_samples`` >= 2 samples per caption, each baseline the mean
    reward of the other K − 1), "learned" or "none".
    ``baseline="learned"``: a state-dependent baseline b_t = w·h_{t-1} + c, a linear value head on the
    decoder state that scores location t (the query, detached: the head learns only the value, never
    reshapes the state). h_{t-1} is fixed before s_t is drawn (it depends on s_{<t} only), so
    E[b_t ∂log α_{t,s_t} | s_{<t}] = b_t Σ_s ∂α_{t,s} = 0: unbiased for any weights (estimators.py).
    It is fitted by least squares to the reward it stands in for (r_b, or r_{b,t} with
    ``credit="remaining"``), ``value_weight`` × the per-token mean squared error, added with value 0 like
    the surrogate (the gradient only; logged as ``value_loss``). Unlike a moving average it follows what
    the state says about the caption (its length so far, how well the words went), like the critic of an
    actor-critic, yet needs no second sample. With ``num_samples`` K > 1 the decoder decodes every caption
    K times in training.
    ``semi_sampling_p``: per batch, with this probability the expected (soft) context Σ_i α_i a_i is used
    instead of a sample (the authors flip one coin per minibatch); such batches add no REINFORCE term and
    do not update the baseline, which estimates the reward of *sampled* attention.
    ``semi_sampling_final`` / ``entropy_weight_final`` with ``anneal_steps`` N: a soft-to-hard curriculum.
    The probability of a soft batch and λ_H move linearly from their start values to these over the
    first N training batches, then stay (``None``: constant, the paper's). Starting at p = 1 the decoder
    first learns as soft attention does (exact gradients of the expected context, no estimator noise),
    so the scores α already point at what the words need when sampling takes over; ending at p = 0 the
    last batches train exactly the hard model that inference runs. Every sampled batch's REINFORCE term
    stays an unbiased estimate of the hard objective's gradient at the current weights (the coin and λ_H
    depend on the step count only, not on s); what the schedule changes is which objective a batch
    follows, as semi-sampling itself does. ``entropy_anneal_start`` S delays λ_H's move: it holds its start
    value for the first S batches and reaches ``entropy_weight_final`` at batch S + N. Why: the bonus
    keeps the policy exploring while the words are still being learnt (faded with the curriculum it
    commits too early, docs/experiments/synthetic_scenes.md), but once the captions are right the reward no longer tells the samples
    apart (leave-one-out advantages near 0) and the bonus alone moves α, spreading it off the objects;
    fading it then stops that drift. A step count, not a caption-quality trigger, so the schedule is
    the same for every seed and every resumed run. A negative ``entropy_weight_final`` ends the schedule with an
    entropy *penalty*: −λ_H·H with λ_H < 0 pushes each α_t to commit to few cells, the bias opposite to
    the bonus's (both are regularisers outside the hard objective, and the penalty's gradient is exact,
    not sampled). Why: inference attends the argmax cell, so a policy spread over an object's cells
    trains its words on cells beside the one inference picks.
    ``credit``: "caption" (the paper's: every location of a caption is credited with r_b) or "remaining"
    (location t with r_{b,t} = Σ_{u≥t} log p(y_u), the words it can still change; unbiased, see
    ``estimators.reward_to_go``). With "remaining" the baselines are per step: none, a moving average
    of the reward per token times the remaining tokens (both moving-average kinds), or the mean r_{·,t} of
    the caption's other K − 1 samples (leave_one_out).
    ``credit="exact_step"``: "remaining" with location t's own word taken out of the sample: its
    expectation over s_t is summed exactly from r_t(i) = log p(y_t | s_t = i, s_{<t}) over the
    ``exact_cells`` most likely cells (0 = all L), the rest through the one sample (the decoder reruns
    step t with each such a_i, ``needs_cell_rewards`` / ``cells_to_rescore``), so the word location t
    affects most carries little or no sampling noise; REINFORCE and its baseline cover the words after t
    (``estimators.exact_step_surrogate``). Unbiased for any ``exact_cells``; it costs a no-grad LSTM step
    and deep output over exact_cells + 1 cells per step.
    """

    location_policy = True  # its cells are a REINFORCE policy: SCST may train them with the caption's reward

    def __init__(
        self,
        feature_dim: int,
        query_dim: int,
        attention_dim: int = 128,
        entropy_weight: float = 0.002,
        baseline: str = "leave_one_out",
        baseline_decay: float = 0.9,
        semi_sampling_p: float = 1.0,
        num_samples: int = 8,
        sample_at_inference: bool = False,
        credit: str = "remaining",
        semi_sampling_final: float | None = 0.5,
        entropy_weight_final: float | None = 0.0,
        anneal_steps: int = 450,
        entropy_anneal_start: int = 1000,
        value_weight: float = 1.0,
        exact_cells: int = 16,
    ):
        super().__init__(feature_dim, query_dim, attention_dim, sample_at_inference)
        if exact_cells < 0:
            raise ValueError(
                f"ReinforceHardAttention: exact_cells={exact_cells} must be >= 0 (0 = every cell)"
            )
        self.exact_cells = exact_cells
        if semi_sampling_final is not None and not 0.0 <= semi_sampling_final <= 1.0:
            raise ValueError(
                f"ReinforceHardAttention: semi_sampling_final={semi_sampling_final} must be in [0, 1]"
            )
        if anneal_steps < 0 or entropy_anneal_start < 0:
            raise ValueError(
                f"ReinforceHardAttention: anneal_steps={anneal_steps} and entropy_anneal_start="
                f"{entropy_anneal_start} must be >= 0 (numbers of training batches)"
            )
        if entropy_weight_final is not None and not math.isfinite(entropy_weight_final):
            raise ValueError(
                f"ReinforceHardAttention: entropy_weight_final={entropy_weight_final} must be a finite number"
            )
        if anneal_steps == 0 and (semi_sampling_final is not None or entropy_weight_final is not None):
            raise ValueError(
                "ReinforceHardAttention: semi_sampling_final / entropy_weight_final need anneal_steps > 0 "
                "(the number of training batches over which to move to them)"
            )
        if value_weight < 0.0 or entropy_weight < 0.0:
            raise ValueError(
                f"ReinforceHardAttention: value_weight={value_weight} and entropy_weight={entropy_weight} must "
                "be >= 0 (the entropy term is a bonus)"
            )
        self.value_weight = value_weight
        # Only with baseline="learned", so other checkpoints keep their exact state dict.
        self.value_head = torch.nn.Linear(query_dim, 1) if baseline == "learned" else None
        self.semi_sampling_final, self.entropy_weight_final = semi_sampling_final, entropy_weight_final
        self.anneal_steps, self.entropy_anneal_start = anneal_steps, entropy_anneal_start
        if credit not in CREDITS:
            raise ValueError(f"ReinforceHardAttention: credit={credit!r}, expected one of {CREDITS}")
        self.credit = credit
        if baseline not in BASELINES:
            raise ValueError(f"ReinforceHardAttention: baseline={baseline!r}, expected one of {BASELINES}")
        if num_samples < 1 or (baseline == "leave_one_out" and num_samples < 2):
            raise ValueError(
                f"ReinforceHardAttention: num_samples={num_samples}; need >= 1, and >= 2 for leave_one_out"
            )
        if not 0.0 <= semi_sampling_p <= 1.0 or not 0.0 <= baseline_decay < 1.0:
            raise ValueError(
                f"ReinforceHardAttention: semi_sampling_p={semi_sampling_p} must be in [0, 1] and "
                f"baseline_decay={baseline_decay} in [0, 1)"
            )
        self.entropy_weight_start = entropy_weight
        self.baseline_kind, self.baseline_decay = baseline, baseline_decay
        self.semi_sampling_p, self.num_samples = semi_sampling_p, num_samples
        self.register_buffer("baseline", torch.zeros(()))  # moving average of the sampled reward (per token
        # for "length_scaled")
        self.register_buffer("sampled_batches", torch.zeros((), dtype=torch.long))
        self.register_buffer("step", torch.zeros((), dtype=torch.long))  # training batches started
        # The semi-sampling coin of the current batch, flipped by ``start_training_batch`` (the training
        # loop's explicit per-batch hook; per-step calls to ``forward`` cannot tell where a batch starts).
        self.sample_this_batch = True

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
        # Checkpoints written before the anneal existed have no step counter: they start at 0.
        state_dict.setdefault(prefix + "step", torch.zeros((), dtype=torch.long))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _annealed(self, start: float, final: float | None, delay: int = 0) -> float:
        """``start`` for the first ``delay`` batches, then moved linearly to ``final`` over the next
        ``anneal_steps`` batches (then ``final``)."""
        if final is None:
            return start
        done = min(max(int(self.step) - 1 - delay, 0) / self.anneal_steps, 1.0)  # this batch's place in it
        return start + (final - start) * done

    @property
    def samples_per_step(self) -> int:  # K = num_samples attention samples per caption in training
        return self.num_samples

    @property
    def rescores_cells(self) -> bool:
        return self.credit == "exact_step"

    @property
    def needs_cell_rewards(self) -> bool:  # only sampled training batches run an estimator
        return self.rescores_cells and self.training and self.sample_this_batch

    def cells_to_rescore(self, alphas: Tensor, chosen: Tensor) -> Tensor:
        """(B, T, C) cells whose word-t likelihood the decoder computes for ``credit="exact_step"``: the
        ``exact_cells`` most likely under α_t (all L when 0), chosen before s_t, then the sampled s_t."""
        n_loc = alphas.shape[-1]
        k = n_loc if self.exact_cells == 0 else min(self.exact_cells, n_loc)
        top = alphas.detach().topk(k, dim=-1).indices  # (B, T, k)
        return torch.cat([top, chosen.unsqueeze(-1)], dim=-1)  # (B, T, k + 1)

    @property
    def soft_batch_probability(self) -> float:
        return self._annealed(self.semi_sampling_p, self.semi_sampling_final)

    @property
    def entropy_weight(self) -> float:
        return self._annealed(self.entropy_weight_start, self.entropy_weight_final, self.entropy_anneal_start)

    @entropy_weight.setter
    def entropy_weight(self, value: float) -> None:  # a constant λ_H from now on (no anneal)
        self.entropy_weight_start, self.entropy_weight_final = value, None

    def start_training_batch(self) -> None:
        self.step += 1
        self.sample_this_batch = bool(torch.rand(()) >= self.soft_batch_probability)

    def forward(
        self, query: Tensor, features: Tensor, keys: Tensor, mask: Tensor | None = None
    ) -> AttentionOutput:
        scores, mask, alphas, log_alphas = self.distribution(query, keys, mask)  # (B·K, L) each
        if self.training and not self.sample_this_batch:
            # Semi-sampling: the expected context, exactly soft attention; log-probs unused (no REINFORCE).
            return AttentionOutput(
                context=attend(alphas, features),
                weights=alphas,
                alphas=alphas,
                log_prob=torch.zeros_like(alphas[:, 0]),
                entropy=entropy_of(alphas),
            )
        if self.training:
            out = self.one_cell(self.choose(alphas), alphas, log_alphas, features)
        else:
            out = self.inference_output(alphas, log_alphas, features)
        if self.value_head is not None:
            out.value = self.value_head(query.detach()).squeeze(-1)  # (B·K,) b(h_{t-1}), chosen-s-free
        return out

    def _value_loss(self, value: Tensor | None, target: Tensor, token_mask: Tensor) -> tuple[Tensor, Tensor]:
        """(baseline, loss): ``value`` (B, T) detached as the baseline, and the value head's least-squares
        fit to ``target`` (B, T) (value_weight × per-token mean squared error), added with value 0."""
        if value is None:
            raise ValueError("ReinforceHardAttention(baseline='learned') needs the decoder's location values")
        fit = self.value_weight * per_token_mean((value - target.detach()).square(), token_mask)
        return value.detach(), fit

    def running_baseline(self, lengths: Tensor) -> Tensor:
        """(B,) the moving-average baseline for captions of ``lengths`` target tokens (no update)."""
        if self.baseline_kind == "length_scaled":
            return self.baseline * lengths  # the buffer holds the reward per target token
        return self.baseline.expand_as(lengths).clone()

    def auxiliary_loss(
        self,
        log_prob: Tensor,
        entropy: Tensor,
        reward: Tensor,
        token_mask: Tensor,
        value: Tensor | None = None,
        alphas: Tensor | None = None,
        cells: CellRewards | None = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """``log_prob``/``entropy``/``token_mask`` (B, T); ``reward`` (B,) = log p(y | s, a), or (B, T) the
        per-token log p(y_t | ...) whose sum that is (needed by ``credit="remaining"``); detached.
        ``value`` (B, T): the learned baselines (``baseline="learned"``). ``alphas`` (B, T, L) and
        ``cells`` (the rewards of the cells ``cells_to_rescore`` named): ``credit="exact_step"``."""
        token_reward = reward.detach() if reward.dim() == 2 else None
        reward = token_reward.mul(token_mask).sum(1) if token_reward is not None else reward.detach()  # (B,)
        if self.credit != "caption":
            if token_reward is None:
                raise ValueError(
                    f"ReinforceHardAttention(credit={self.credit!r}) needs the per-token rewards (B, T)"
                )
            return self._remaining_credit_loss(
                log_prob, entropy, token_reward, token_mask, value, alphas, cells
            )
        lengths = token_mask.sum(1)  # (B,) target tokens per caption
        entropy_mean = per_token_mean(entropy, token_mask)
        logs = {"reward_mean": reward.mean(), "attention_entropy": entropy_mean.detach()}
        if not self.training:  # validation: report, but neither learn nor move the baseline
            return reward.new_zeros(()), {**logs, "baseline": self.running_baseline(lengths).mean()}
        loss = -self.entropy_weight * entropy_mean
        sampled = self.sample_this_batch
        logs["sampled_batch"] = reward.new_tensor(float(sampled))
        if not sampled:
            return loss, {**logs, "baseline": self.running_baseline(lengths).mean()}
        fit = None
        if self.baseline_kind == "learned":  # one baseline per step, b(h_{t-1}), all for the same r_b
            baseline, fit = self._value_loss(value, reward.unsqueeze(1).expand_as(token_mask), token_mask)
        elif self.baseline_kind == "leave_one_out":
            baseline = leave_one_out_baseline(reward, self.num_samples)  # (B·K,)
        elif self.baseline_kind in ("moving_average", "length_scaled"):
            batch_value = (
                reward.sum() / lengths.sum().clamp_min(1.0)
                if self.baseline_kind == "length_scaled"
                else reward.mean()
            )
            if self.sampled_batches == 0:
                self.baseline.copy_(batch_value)  # warm start (see the class docstring)
            baseline = self.running_baseline(lengths)  # b before this batch's update
            self.baseline.copy_(moving_average(self.baseline, batch_value, self.baseline_decay))
        else:
            baseline = torch.zeros_like(reward)
        self.sampled_batches += 1
        advantage = reward.unsqueeze(1) - baseline if baseline.dim() == 2 else reward - baseline  # (B,[T])
        tokens = token_mask.sum().clamp_min(1.0)
        surrogate = score_function_surrogate(log_prob, advantage, token_mask) / tokens
        # Added as s − detach(s): the same gradient, but value 0, so train/loss stays xent + reg − λ_H·H
        # (the surrogate's value, tens of nats of noise, means nothing; only its gradient does).
        loss = loss + (surrogate - surrogate.detach())  # per target token, like the xent
        return self._finish(loss, logs, fit, baseline, advantage, token_mask)

    @staticmethod
    def _finish(
        loss: Tensor, logs: dict, fit: Tensor | None, baseline: Tensor, advantage: Tensor, token_mask: Tensor
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """A sampled batch's loss with the learned baseline's fit added (value 0, like the surrogate), and
        its logs: the baseline of the first step, the advantage's spread (over real steps when per step)."""
        if fit is not None:
            loss, logs["value_loss"] = loss + (fit - fit.detach()), fit.detach()
        first = baseline[:, 0] if baseline.dim() == 2 else baseline  # (B,)
        live = advantage[token_mask.bool()] if advantage.dim() == 2 else advantage
        return loss, {**logs, "baseline": first.mean(), "advantage_std": live.std(unbiased=False)}

    def _remaining_credit_loss(
        self,
        log_prob: Tensor,
        entropy: Tensor,
        token_reward: Tensor,
        token_mask: Tensor,
        value: Tensor | None,
        alphas: Tensor | None = None,
        cells: CellRewards | None = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """``credit="remaining"``: every step's advantage r_{b,t} − b_{b,t} (class docstring).
        ``credit="exact_step"``: the same for the words after t, and location t's own word in closed
        form over every cell (``estimators.exact_step_surrogate``)."""
        total = reward_to_go(token_reward, token_mask)  # (B, T) the words from t on
        remaining = token_mask.flip(1).cumsum(1).flip(1) * token_mask  # (B, T) tokens from t on
        exact = self.credit == "exact_step"
        # What REINFORCE credits location t with: the words from t on, or after t when word t is exact.
        step_reward = total - token_reward * token_mask if exact else total  # (B, T)
        remaining = remaining - token_mask if exact else remaining
        entropy_mean = per_token_mean(entropy, token_mask)
        logs = {"reward_mean": total[:, 0].mean(), "attention_entropy": entropy_mean.detach()}
        if not self.training:
            return token_reward.new_zeros(()), {**logs, "baseline": (self.baseline * remaining[:, 0]).mean()}
        loss = -self.entropy_weight * entropy_mean
        logs["sampled_batch"] = token_reward.new_tensor(float(self.sample_this_batch))
        if not self.sample_this_batch:
            return loss, {**logs, "baseline": (self.baseline * remaining[:, 0]).mean()}
        fit = None
        if self.baseline_kind == "learned":
            baseline, fit = self._value_loss(value, step_reward, token_mask)  # (B, T)
        elif self.baseline_kind == "leave_one_out":
            k = self.num_samples
            grouped = step_reward.view(-1, k, step_reward.shape[1])  # (B, K, T): a caption's K samples
            baseline = ((grouped.sum(1, keepdim=True) - grouped) / (k - 1)).reshape_as(step_reward)
        elif self.baseline_kind in ("moving_average", "length_scaled"):
            per_token = (token_reward * token_mask).sum() / token_mask.sum().clamp_min(1.0)
            if self.sampled_batches == 0:
                self.baseline.copy_(per_token)
            baseline = self.baseline * remaining  # (B, T): depends on t and the target, not on s
            self.baseline.copy_(moving_average(self.baseline, per_token, self.baseline_decay))
        else:
            baseline = torch.zeros_like(step_reward)
        self.sampled_batches += 1
        advantage = (step_reward - baseline) * token_mask  # (B, T)
        surrogate = score_function_surrogate(log_prob, advantage, token_mask)
        if exact:
            if alphas is None or cells is None:
                raise ValueError(
                    "ReinforceHardAttention(credit='exact_step') needs alphas (B, T, L) and the cells' "
                    "rewards from the decoder"
                )
            surrogate = surrogate + exact_step_surrogate(alphas, log_prob, cells, token_mask)
            if cells.reward.requires_grad:  # the decoder's word-t gradient over S too (a control variate)
                surrogate = surrogate + exact_step_pathwise(alphas, cells, token_mask)
        surrogate = surrogate / token_mask.sum().clamp_min(1.0)  # per target token, like the xent
        loss = loss + (surrogate - surrogate.detach())
        return self._finish(loss, logs, fit, baseline, advantage, token_mask)
