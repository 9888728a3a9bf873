"""What shapes each step's next-token distribution, as HF's logits processors and warpers do.

*Processors* define the distribution that is searched and scored: <pad>/<start> are never generated,
nor <unk> unless ``allow_unk`` (HF's ``bad_words_ids``: a caption would print with a hole where it was),
CTRL's repetition penalty, n-gram blocking. ``token_log_probs`` and ``score`` are log-probabilities of this
processed distribution (equal to the model's own when no processor is on). *Warpers* (temperature,
top-k, top-p) only shape what sampling draws from; the drawn token is scored under the processed
distribution, so a sample's score is comparable with a beam's.
"""

from __future__ import annotations

import torch
from torch import Tensor

from captioning.data.vocab import Vocab
from captioning.decoding.config import GenerationConfig


def repetition_penalty(logits: Tensor, history: Tensor, penalty: float) -> Tensor:
    """CTRL (Keskar et al. 2019), as HF applies it: the logit of every word already in the row's caption
    is divided by ``penalty`` when positive and multiplied by it when negative. logits (N, V), history (N, t)."""
    if penalty == 1.0 or history.shape[1] == 0:
        return logits
    seen = torch.zeros_like(logits, dtype=torch.bool).scatter_(1, history, True)  # (N, V)
    seen[:, Vocab.pad_id] = False  # <pad> fills finished rows; it is not a word of the caption
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalised, logits)


def banned_ngram_mask(history: Tensor, n: int, vocab_size: int) -> Tensor:
    """(N, V) True for every word that would complete an n-gram already in the row's caption.

    The last n-1 words are compared with every earlier (n-1)-prefix at once: history (N, t) unfolds into
    its t-n+1 n-grams (N, t-n+1, n); a prefix match bans that n-gram's last word."""
    rows, t = history.shape
    # float32 counts whatever the default dtype (Lightning's bf16-true sets it to bf16 inside a step)
    banned = torch.zeros(rows, vocab_size, device=history.device, dtype=torch.float32)
    if n < 1 or t < n:  # an n-gram needs n words; the next word would make the (t+1)-th
        return banned.bool()
    grams = history.unfold(1, n, 1)  # (N, t-n+1, n)
    current = history[:, t - n + 1 :]  # (N, n-1): the prefix the next word would extend
    match = (grams[:, :, :-1] == current.unsqueeze(1)).all(-1)  # (N, t-n+1)
    banned.scatter_add_(1, grams[:, :, -1], match.float())  # a word may close several matching n-grams
    return banned > 0


def processed_log_probs(logits: Tensor, history: Tensor, cfg: GenerationConfig) -> Tensor:
    """log p(next word) of the searched distribution (module docstring); logits (N, V), history (N, t)."""
    logits = repetition_penalty(logits.float(), history, cfg.repetition_penalty)
    logp = torch.log_softmax(logits, dim=-1)
    logp[:, Vocab.pad_id] = float("-inf")  # not words: <pad> is never a target, <start> never follows
    logp[:, Vocab.start_id] = float("-inf")
    if not cfg.allow_unk:  # masked, not renormalised: as HF's processors do on the log-softmax scores
        logp[:, Vocab.unk_id] = float("-inf")
    if cfg.no_repeat_ngram_size:
        logp = logp.masked_fill(
            banned_ngram_mask(history, cfg.no_repeat_ngram_size, logp.shape[-1]), float("-inf")
        )
    return logp


def warp(logp: Tensor, cfg: GenerationConfig) -> Tensor:
    """Sampling logits after temperature, top-k and top-p (nucleus, Holtzman et al. 2020), in HF's order."""
    logits = logp / cfg.temperature
    if cfg.top_k and cfg.top_k < logits.shape[-1]:
        kth = logits.topk(cfg.top_k, dim=-1).values[:, -1:]  # (N, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if cfg.top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)  # (N, V)
        probs = sorted_logits.softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs  # mass of the words ranked above each word
        drop = before >= cfg.top_p  # the smallest set whose mass reaches top_p is kept (never empty)
        logits = logits.masked_fill(torch.zeros_like(drop).scatter_(1, order, drop), float("-inf"))
    return logits
