"""Training objective: masked cross-entropy (optionally label-smoothed) + doubly stochastic attention
(Xu et al. eq. 14) + whatever the decoder adds (REINFORCE surrogate and entropy bonus for hard attention,
§4.1)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch.nn.functional as F
from torch import Tensor

from captioning.data.vocab import Vocab
from captioning.models.attention.base import per_token_mean
from captioning.models.decoders.base import Decoder, DecoderOutput


@dataclass
class LossTerms:
    loss: Tensor  # what is minimised
    xent: Tensor  # mean cross-entropy per target token (nats), never smoothed: comparable across runs
    attention_reg: Tensor  # λ Σ_i (1 - Σ_t α_ti)² averaged over the batch, + λ_E H(α_t) per token
    logs: dict[str, Tensor] = field(default_factory=dict)  # decoder-specific diagnostics


def doubly_stochastic(alphas: Tensor, token_mask: Tensor) -> Tensor:
    """Σ_i (1 - Σ_t α_ti)² per caption (eq. 14): encourages attention to every location over the caption.

    alphas (B, T, L), token_mask (B, T) -> (B,). Padded steps do not count towards Σ_t.
    """
    coverage = (alphas * token_mask.unsqueeze(-1)).sum(1)  # (B, L)
    return ((1.0 - coverage) ** 2).sum(-1)  # (B,)


def attention_entropy(alphas: Tensor, token_mask: Tensor) -> Tensor:
    """Mean H(α_t) = −Σ_i α_ti log α_ti over the real target tokens: alphas (B, T, L) -> ()."""
    entropy = -(alphas * alphas.clamp_min(1e-12).log()).sum(-1)  # (B, T); 0·log 0 = 0
    return per_token_mean(entropy, token_mask)


def caption_loss(
    output: DecoderOutput, targets: Tensor, decoder: Decoder, label_smoothing: float = 0.0
) -> LossTerms:
    """``targets`` (B, T) are the next tokens, <pad> where the caption has ended.

    ``label_smoothing`` ε (Szegedy et al. 2016) trains against (1 − ε)·one-hot + ε·uniform over the
    vocabulary: loss = (1 − ε)·NLL + ε·mean_v(−log p_v), per token. Only the minimised loss is smoothed;
    ``xent`` and the token log-likelihoods the decoder's own terms see (REINFORCE's reward) stay the
    model's true likelihood.

    When the decoder drew K samples per caption (logits with B·K rows, a caption's copies adjacent),
    the targets are repeated to match, so every term averages over the K samples too.
    """
    rows = output.logits.shape[0]
    if rows != targets.shape[0]:
        if rows % targets.shape[0]:
            raise ValueError(
                f"caption_loss: the decoder returned {rows} rows for {targets.shape[0]} captions; "
                "expected a whole multiple (K samples per caption)"
            )
        targets = targets.repeat_interleave(rows // targets.shape[0], dim=0)  # (B·K, T)
    # float32 whatever the logits' dtype: a bf16 sum of ones is inexact past 256 (515 tokens sum to 516)
    token_mask = (targets != Vocab.pad_id).float()  # (B, T)
    b, t, v = output.logits.shape
    fit_extra = None
    if label_smoothing:  # one log-softmax serves the target's term and the uniform one
        logp = F.log_softmax(output.logits.float(), -1)  # (B, T, V)
        token_logp = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)
        fit_extra = per_token_mean(-logp.mean(-1), token_mask)  # mean over the vocabulary of −log p_v
    else:
        token_logp = -F.cross_entropy(
            output.logits.reshape(b * t, v).float(), targets.reshape(b * t), reduction="none"
        ).view(b, t)  # (B·T, V) vs (B·T,) -> (B, T); rows, not (B, V, T): softmax over contiguous memory
    xent = -per_token_mean(token_logp, token_mask)
    # (1 − ε)·NLL + ε·uniform NLL, per real token
    fit = xent if fit_extra is None else (1.0 - label_smoothing) * xent + label_smoothing * fit_extra
    alpha_c = decoder.alpha_c  # the decoder's own weight: eq. 14 is a term of its attention
    reg = alpha_c * doubly_stochastic(output.alphas, token_mask).mean() if alpha_c else xent.new_zeros(())
    if decoder.entropy_c:  # a sharpness penalty on α (LSTMDecoder's docstring)
        reg = reg + decoder.entropy_c * attention_entropy(output.alphas, token_mask)
    aux, logs = decoder.auxiliary_loss(output, token_logp.detach(), token_mask, targets)
    return LossTerms(loss=fit + reg + aux, xent=xent, attention_reg=reg, logs=logs)
