"""Self-critical sequence training (Rennie et al. 2017) with the baseline of Luo (2020).

For every training image, K captions are sampled from the model, w^k ~ p(w | I); each earns the reward
r^k = CIDEr-D(w^k; references of I) with document frequencies from the *training* references
(``captioning.metrics.cider``). The baseline of sample k is the mean reward of the image's other K−1
samples, b^k = (Σ_j r^j − r^k) / (K − 1): it does not depend on w^k, so the estimator stays unbiased,
and unlike the greedy baseline of Rennie et al. it needs no extra decode (Luo 2020, "a better variant
of self-critical sequence training"). The loss, minimised, per sampled token:

    L = − Σ_k (r^k − b^k) Σ_t log p(w^k_t | w^k_<t, I)  /  (number of sampled tokens)

With ``bleu_reward_weight=w`` > 0 the reward is r^k = CIDEr-D + w · BLEU-4, the per-caption BLEU-4 of the
coco-caption toolkit (``captioning.metrics.bleu``), as ruotianluo/self-critical.pytorch mixes them: on
Flickr8k the CIDEr-D reward alone raised CIDEr-D far more than BLEU-4 (docs/experiments/flickr8k.md), the
score most papers report first.

``<end>`` is one of the sampled tokens: its log-probability gets the caption's advantage like every word,
so the model learns when to stop; the reward scores the words only (``<end>`` removed, as the metric
would see the caption). Sampling and the teacher-forced pass run in eval mode (no dropout), so the
log-probabilities are those of the policy that sampled.

Hard attention trained by REINFORCE (``location_policy``, on by default for a layer that declares it,
``ReinforceHardAttention``) is a second policy acting inside the same trajectory: at step t the model draws a location
s_t ~ Categorical(α_t(h_t)), then the word w_t ~ p(w | s_≤t, w_<t, I). The trajectory's probability
factorises over steps, log p(s, w | I) = Σ_t [log α_{t, s_t} + log p(w_t | s_≤t, w_<t, I)], and the reward
depends on the words only, so the score-function identity gives

    ∇ E_{s,w}[r(w)] = E_{s,w}[ (r(w) − b) · Σ_t (∇ log p(w_t | ...) + ∇ log α_{t, s_t}) ]

for any b that does not depend on (s, w) of the sample itself, here the leave-one-out mean of the other
K − 1 trajectories. The locations are therefore *sampled* while the captions are sampled (not the
argmax), recorded, and replayed in the teacher-forced pass (``HardAttention.replay``), which returns
log α_{t, s_t} of the recorded cells; both terms get the same advantage, masked to the same tokens
(a location at step t produced w_t, ``<end>`` included). With ``location_policy=false`` (and for Gumbel
hard attention, whose locations are trained through the relaxation) the argmax cells are taken and SCST
trains the word policy given them.

Switched on by composition, from a cross-entropy checkpoint (weights only, a new optimizer):
``captioning-train experiment=flickr8k_soft objective=scst init_from=CKPT``. A stopped or killed run
resumes with the same command plus ``ckpt_path=last``: its own weights, optimizer and step are restored
and ``init_from`` is not loaded again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from captioning.data.sources import CaptionSource
from captioning.data.tokenize import tokenize
from captioning.data.vocab import Vocab
from captioning.decoding import generate
from captioning.decoding.config import OPTION_CHECKS
from captioning.metrics.bleu import SentenceBleu
from captioning.metrics.cider import CiderD
from captioning.models.attention.base import per_token_mean
from captioning.models.attention.estimators import (
    leave_one_out_baseline,  # the same baseline as K-sample REINFORCE
)
from captioning.training.lit_module import CaptionLitModule


class SelfCriticalLitModule(CaptionLitModule):
    def __init__(
        self,
        *args: Any,
        num_samples: int = 5,
        sample_temperature: float = 1.0,
        sample_max_new_tokens: int = 16,
        location_policy: bool | None = None,
        bleu_reward_weight: float = 0.0,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        if num_samples < 2:
            raise ValueError(
                f"objective scst: num_samples={num_samples}, expected >= 2 (a leave-one-out baseline)"
            )
        for name, value in (("temperature", sample_temperature), ("max_new_tokens", sample_max_new_tokens)):
            ok, expected = OPTION_CHECKS[name]  # the bounds of the decoding option of the same name
            if not ok(value):  # else the first step fails inside sampling (0: a division, an empty caption)
                raise ValueError(f"objective scst: sample_{name}={value!r}, expected {expected}")
        if not bleu_reward_weight >= 0.0:  # also NaN
            raise ValueError(f"objective scst: bleu_reward_weight={bleu_reward_weight!r}, expected >= 0")
        self.num_samples, self.bleu_reward_weight = num_samples, float(bleu_reward_weight)
        self.sample_temperature, self.sample_max_new_tokens = sample_temperature, sample_max_new_tokens
        attention = getattr(self.net.decoder, "attention", None)
        can = attention is not None and attention.location_policy  # what the layer declares (AttentionLayer)
        if location_policy and not can:
            raise ValueError(
                "objective scst: location_policy=true needs an attention layer whose cells are a policy "
                f"(location_policy: ReinforceHardAttention), the decoder has {type(attention).__name__}"
            )
        self.location_policy = can if location_policy is None else location_policy
        self.reward: CiderD | CiderBleuReward | None = None

    # -- set-up ---------------------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        if stage != "fit":
            return
        datamodule = self.trainer.datamodule
        if getattr(datamodule, "train_items", "pairs") != "images":
            raise ValueError(
                "objective scst needs data.train_items=images (whole images with their references)"
            )
        # the distinct reference sets of the views the items come from (batch["indices"] are rows of their
        # concatenation): the training split's, and its mirror's (side words swapped) with data.train_flip;
        # a crop's references are its image's, so crops add none
        sources = [datamodule.source(v) for v in datamodule.reference_views("train")]
        self.reward = scst_reward(*sources, bleu_weight=self.bleu_reward_weight)

    # -- the self-critical step -----------------------------------------------------------------------
    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        k = self.num_samples
        self.net.eval()  # sample and score the same policy (no dropout), see the module docstring
        features = self.net.encode_batch(batch)  # (B, L, D): from images or cached features
        attention = self.net.decoder.attention if self.location_policy else None
        with attention.sampling() if attention is not None else contextlib.nullcontext():
            sampled = generate(
                self.net.decoder, features.detach(), do_sample=True, num_return_sequences=k,
                temperature=self.sample_temperature, max_new_tokens=self.sample_max_new_tokens,
                allow_unk=True,  # the policy's own distribution: the loss's log p is over every word
            )  # fmt: skip  # (B·K, T) ids with <end>, an image's K samples adjacent
        tokens = sampled.tokens
        captions = [" ".join(self.vocab.decode(row.tolist())) for row in tokens]
        images = batch["indices"].repeat_interleave(k).tolist()
        rewards = torch.as_tensor(
            self.reward.scores(captions, images), dtype=torch.float32, device=tokens.device
        )
        advantage = rewards - leave_one_out_baseline(rewards, k)  # (B·K,)
        inputs = teacher_forced_inputs(tokens)  # (B·K, T): <start> w_1 .. w_{T-1}
        mask = (tokens != Vocab.pad_id).float()  # (B·K, T): words and <end>
        replay = contextlib.nullcontext()
        if attention is not None:  # the sampled cells s_t (one-hot rows), re-scored in the pass below
            replay = attention.replay(sampled.attention.argmax(-1))  # (B·K, T)
        with replay:
            output = self.net.decoder(features.repeat_interleave(k, dim=0), inputs)  # logits (B·K, T, V)
        log_probs = torch.log_softmax(output.logits.float(), -1)  # (B·K, T, V)
        logp = log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # (B·K, T)
        if attention is not None:  # + log α_{t, s_t}: the location policy's term (module docstring)
            location_logp = output.aux["location_log_prob"].float()  # (B·K, T)
            self.log(
                "train/location_log_prob",
                (location_logp * mask).sum(1).mean().detach(),
                batch_size=len(batch["indices"]),
            )
            logp = logp + location_logp
        loss = -(advantage.unsqueeze(1) * logp * mask).sum() / mask.sum().clamp_min(1.0)
        b = len(batch["indices"])
        self.log("train/loss", loss, prog_bar=True, batch_size=b)
        self.log("train/reward", rewards.mean(), prog_bar=True, batch_size=b)
        self.log("train/reward_std", rewards.std(), batch_size=b)
        self.log("train/sample_length", mask.sum(1).mean(), batch_size=b)
        self.log("train/sample_log_prob", (logp * mask).sum(1).mean().detach(), batch_size=b)
        self._log_diagnostics(log_probs.detach(), tokens, mask, b)
        return loss

    def _log_diagnostics(self, log_probs: Tensor, tokens: Tensor, mask: Tensor, batch_size: int) -> None:
        """What limits the policy's progress (docs/faq.md, "SCST gains little"): the share of samples cut at
        ``sample_max_new_tokens`` before their ``<end>`` (they are scored as cut), and the mean entropy of
        the word distribution at the sampled steps (nats; it falls as the policy sharpens)."""
        self.log("train/sample_truncated", cut_before_end(tokens).float().mean(), batch_size=batch_size)
        self.log("train/token_entropy", per_token_mean(word_entropy(log_probs), mask), batch_size=batch_size)

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        self.net.train()


# -- the pieces scripts/scst_diagnostics.py measures the same way ------------------------------------------
def references(*sources: CaptionSource) -> list[list[str]]:
    """Image i's references, tokenised as the captions are; with several sources image i is their
    concatenation's (the training split and its mirror: ``i + N`` is image i mirrored, ``ImageDataset``'s
    ``indices``)."""
    return [
        [" ".join(tokenize(c)) for c in source.captions(i)] for source in sources for i in range(len(source))
    ]


def scst_reward(*sources: CaptionSource, bleu_weight: float = 0.0) -> CiderD | CiderBleuReward:
    """CIDEr-D of a caption against image i's ``references``, document frequencies from all the
    ``sources``' references: the reward, over the training split (and its mirror, whose references count as
    documents of their own: N doubles, and an n-gram in no reference weighs log 2N for log N) in training.
    ``bleu_weight`` > 0 adds that times the caption's BLEU-4 against the same references (tokenised once
    for both)."""
    refs = references(*sources)
    cider = CiderD(refs)
    return CiderBleuReward(cider, SentenceBleu(refs), bleu_weight) if bleu_weight else cider


class CiderBleuReward:
    """r = CIDEr-D + ``bleu_weight`` · BLEU-4 per caption, both against the same references."""

    def __init__(self, cider: CiderD, bleu: SentenceBleu, bleu_weight: float):
        self.cider, self.bleu, self.bleu_weight = cider, bleu, bleu_weight

    def scores(self, hypotheses: Sequence[str], images: Sequence[int]) -> np.ndarray:
        """(N,) the mixed reward of ``hypotheses[j]`` against the references of ``images[j]``."""
        return self.cider.scores(hypotheses, images) + self.bleu_weight * self.bleu.scores(hypotheses, images)


def teacher_forced_inputs(tokens: Tensor) -> Tensor:
    """(N, T) sampled ids -> (N, T) decoder inputs <start> w_1 .. w_{T-1}, the pass that re-scores them."""
    return torch.cat([torch.full_like(tokens[:, :1], Vocab.start_id), tokens[:, :-1]], 1)


def cut_before_end(tokens: Tensor) -> Tensor:
    """(N,) True for the samples with no ``<end>`` within the cap (scored as cut)."""
    return ~(tokens == Vocab.end_id).any(1)


def word_entropy(log_probs: Tensor) -> Tensor:
    """(..., V) log-probabilities -> (...) entropy of the word distribution, in nats."""
    return -(log_probs.exp() * log_probs).sum(-1)
