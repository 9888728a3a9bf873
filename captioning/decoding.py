"""Greedy and batched beam search: free functions over the ``init_state / step`` decoder interface.

Both return, for every image, the generated ids (without <start>, up to and including <end> when it was
emitted), the attention weights of every generated token, and the caption's log-probability.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from captioning.data.vocab import Vocab
from captioning.models.decoders.base import Decoder


def _next_log_probs(logits: Tensor) -> Tensor:
    """log p(next word): <pad> and <start> are never generated (they are not words; <pad> is never a target)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    logp[:, Vocab.pad_id] = float("-inf")
    logp[:, Vocab.start_id] = float("-inf")
    return logp


@dataclass
class Generated:
    tokens: Tensor  # (B, T) ids, <pad> after <end>
    attention: Tensor  # (B, T, L) attention used to produce each token
    log_prob: Tensor  # (B,) Σ_t log p(token_t), over tokens up to and including <end>
    lengths: Tensor  # (B,) number of tokens up to and including <end> (or T if none)
    score: Tensor  # (B,) the ranking score: log_prob / lengths**length_penalty


@torch.no_grad()
def greedy(
    decoder: Decoder,
    features: Tensor,
    max_length: int = 20,
    start_id: int = Vocab.start_id,
    end_id: int = Vocab.end_id,
    mask: Tensor | None = None,
) -> Generated:
    """Pick the most likely word at each step (features (B, L, D))."""
    b = features.shape[0]
    state = decoder.init_state(features, mask)
    tokens = torch.full((b,), start_id, dtype=torch.long, device=features.device)
    finished = torch.zeros(b, dtype=torch.bool, device=features.device)
    log_prob = torch.zeros(b, device=features.device)  # fp32 sums even under bf16 autocast
    lengths = torch.zeros(b, dtype=torch.long, device=features.device)
    out_tokens, out_att = [], []
    for _ in range(max_length):
        logits, att, state = decoder.step(tokens, state)  # (B, V), (B, L)
        logp = _next_log_probs(logits)
        step_logp, tokens = logp.max(dim=-1)  # (B,)
        tokens = tokens.masked_fill(finished, Vocab.pad_id)
        log_prob += step_logp.masked_fill(finished, 0.0)
        lengths += (~finished).long()
        out_tokens.append(tokens)
        out_att.append(att.masked_fill(finished.unsqueeze(1), 0.0))
        finished |= tokens == end_id
        if finished.all():
            break
    return Generated(
        tokens=torch.stack(out_tokens, 1),
        attention=torch.stack(out_att, 1),
        log_prob=log_prob,
        lengths=lengths,
        score=log_prob,
    )


@torch.no_grad()
def beam_search(
    decoder: Decoder,
    features: Tensor,
    beam_size: int = 3,
    max_length: int = 20,
    length_penalty: float = 0.0,
    start_id: int = Vocab.start_id,
    end_id: int = Vocab.end_id,
    mask: Tensor | None = None,
) -> Generated:
    """Beam search over all images at once: the state holds B·K rows, beams of an image adjacent.

    Finished beams keep their score and only extend with <pad> at zero cost, so they compete with open
    beams until the end. The best of the K final beams is chosen by log_prob / length**length_penalty
    (0 = no normalisation). With no <end> by ``max_length``, beams are ranked as they stand.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    b, k, device = features.shape[0], beam_size, features.device
    state = decoder.expand_state(decoder.init_state(features, mask), k)  # B·K recurrent rows, B static
    tokens = torch.full((b * k,), start_id, dtype=torch.long, device=device)
    scores = torch.full((b, k), float("-inf"), device=device)
    scores[:, 0] = 0.0  # all beams start identical: expand only the first
    finished = torch.zeros(b * k, dtype=torch.bool, device=device)
    history = torch.empty(b * k, 0, dtype=torch.long, device=device)
    att_history: Tensor | None = None
    base = (torch.arange(b, device=device) * k).unsqueeze(1)  # (B, 1) first row of each image
    for _ in range(max_length):
        logits, att, state = decoder.step(tokens, state)  # (B·K, V), (B·K, L)
        logp = _next_log_probs(logits)
        vocab = logp.shape[-1]
        # A finished beam may only continue with <pad>, at no cost.
        frozen = torch.full_like(logp[0], float("-inf"))
        frozen[Vocab.pad_id] = 0.0
        logp = torch.where(finished.unsqueeze(1), frozen, logp)
        cand = scores.view(b * k, 1) + logp  # (B·K, V)
        top, flat = cand.view(b, k * vocab).topk(k, dim=-1)  # (B, K)
        beam, word = flat // vocab, flat % vocab  # (B, K) source beam and chosen word
        rows = (base + beam).view(-1)  # (B·K,) rows to keep, never crossing images
        scores, tokens = top, word.view(-1)
        history = torch.cat([history.index_select(0, rows), tokens.unsqueeze(1)], 1)  # (B·K, t)
        att = att.index_select(0, rows).masked_fill(finished.index_select(0, rows).unsqueeze(1), 0.0)
        att_history = (
            att.unsqueeze(1)
            if att_history is None
            else torch.cat([att_history.index_select(0, rows), att.unsqueeze(1)], 1)
        )  # (B·K, t, L)
        finished = finished.index_select(0, rows) | (tokens == end_id)
        state = decoder.reorder_state(state, rows)
        if finished.all():
            break
    lengths = ((history != Vocab.pad_id).sum(1)).view(b, k)  # (B, K)
    ranking = scores / lengths.clamp_min(1).float() ** length_penalty  # (B, K)
    best = ranking.argmax(dim=-1)  # (B,)
    rows = base.squeeze(1) + best  # (B,)
    return Generated(
        tokens=history.index_select(0, rows),
        attention=att_history.index_select(0, rows),
        log_prob=scores.gather(1, best.unsqueeze(1)).squeeze(1),
        lengths=lengths.gather(1, best.unsqueeze(1)).squeeze(1),
        score=ranking.gather(1, best.unsqueeze(1)).squeeze(1),
    )


def generate(
    decoder: Decoder, features: Tensor, beam_size: int = 1, max_length: int = 20, length_penalty: float = 0.0
) -> Generated:
    """Greedy for beam_size 1, beam search otherwise."""
    if beam_size == 1:
        return greedy(decoder, features, max_length=max_length)
    return beam_search(
        decoder, features, beam_size=beam_size, max_length=max_length, length_penalty=length_penalty
    )
