"""One batched search for greedy decoding, beam search and sampling, over ``init_state / step``.

Every image gets R rows (R = ``num_beams``, or ``num_return_sequences`` samples), adjacent in the
batch; the decoder's recurrent state has B·R rows and its image-only state stays at B rows. Per step:

* the processed next-word log-probabilities of each row (``processors.py``);
* rows that emitted ``<end>`` are frozen: they may only continue with ``<pad>``, at zero cost;
* search: the R best (row, word) extensions of an image over its R·V candidates (R = 1 is greedy);
  sampling: each row draws its word from the warped distribution, rows never swap.

At the end an image's rows are ranked by log_prob / length ** length_penalty and the best
``num_return_sequences`` are returned, best first; samples too are sorted by that score (ties keep the
order they were drawn in), so an image's first row is always its best-scored caption. With no <end> by
``max_new_tokens``, rows are ranked as they stand.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import Tensor

from captioning.data.vocab import Vocab
from captioning.decoding.config import GenerationConfig
from captioning.decoding.processors import processed_log_probs, warp
from captioning.models.attention.base import AttentionLayer
from captioning.models.decoders.base import Decoder


@dataclass
class SearchOutput:
    """B·N rows (N = ``num_return_sequences``; an image's N captions adjacent, best first)."""

    tokens: Tensor  # (B·N, T) ids, <pad> after <end>
    attention: Tensor  # (B·N, T, L) attention used to produce each token
    token_log_probs: Tensor  # (B·N, T) processed log p of each token, 0 after <end>
    log_prob: Tensor  # (B·N,) Σ_t token_log_probs, up to and including <end>
    lengths: Tensor  # (B·N,) tokens up to and including <end> (or T if none)
    score: Tensor  # (B·N,) the ranking score: log_prob / lengths**length_penalty
    num_return_sequences: int = 1


def _frozen(logp: Tensor, finished: Tensor) -> Tensor:
    """A finished row may only continue with <pad>, at no cost."""
    frozen = torch.full_like(logp[0], float("-inf"))
    frozen[Vocab.pad_id] = 0.0
    return torch.where(finished.unsqueeze(1), frozen, logp)


@torch.no_grad()
def generate(
    decoder: Decoder,
    features: Tensor,
    config: GenerationConfig | None = None,
    *,
    generator: torch.Generator | None = None,
    mask: Tensor | None = None,
    start_id: int = Vocab.start_id,
    end_id: int = Vocab.end_id,
    **options,
) -> SearchOutput:
    """Decode grids ``features`` (B, L, D) with ``config`` (options given by name override it).

    ``generator`` makes sampling reproducible (the same seed, the same captions)."""
    cfg = (config or GenerationConfig()).replace(**options)  # no options: the config itself
    with _hard_attention_context(decoder, cfg.hard_attention):
        return _search(decoder, features, cfg, generator, mask, start_id, end_id)


def _hard_attention_context(decoder: Decoder, context: str) -> contextlib.AbstractContextManager:
    """``hard_attention="expected"``: a hard-attention decoder reads Σ α_i a_i (see the option's doc).

    Every hard-attention layer of the decoder is switched, so an ensemble's hard members are too."""
    stack = contextlib.ExitStack()
    for layer in hard_attention_layers(decoder):
        stack.enter_context(layer.inference_context(context))
    return stack


def hard_attention_layers(decoder: Decoder) -> list:
    """The decoder's attention layers that declare ``inference_contexts`` (hard attention: one cell, or the
    expected context instead): the layers the ``hard_attention`` option acts on. Empty for soft attention,
    where the option would change nothing."""
    return [m for m in decoder.modules() if isinstance(m, AttentionLayer) and m.inference_contexts]


def _search(
    decoder: Decoder,
    features: Tensor,
    cfg: GenerationConfig,
    generator: torch.Generator | None,
    mask: Tensor | None,
    start_id: int,
    end_id: int,
) -> SearchOutput:
    b, device = features.shape[0], features.device
    sample = cfg.do_sample
    r = cfg.num_return_sequences if sample else cfg.num_beams  # rows per image
    state = decoder.init_state(features, mask)
    if r > 1:
        state = decoder.expand_state(state, r)  # B·R recurrent rows, B static
    tokens = torch.full((b * r,), start_id, dtype=torch.long, device=device)
    scores = torch.zeros(b, r, device=device)  # fp32 sums even under bf16 autocast
    if not sample:
        scores[:, 1:] = float("-inf")  # all beams start identical: expand only the first
    finished = torch.zeros(b * r, dtype=torch.bool, device=device)
    history = torch.empty(b * r, 0, dtype=torch.long, device=device)
    logp_history = torch.empty(b * r, 0, device=device)
    att_history: Tensor | None = None
    base = (torch.arange(b, device=device) * r).unsqueeze(1)  # (B, 1) first row of each image
    moves = r > 1 and not sample  # only beams swap rows; greedy and sampled rows stay where they are

    def keep_rows(t: Tensor, rows: Tensor) -> Tensor:
        return t.index_select(0, rows) if moves else t

    for _ in range(cfg.max_new_tokens):
        logits, att, state = decoder.step(tokens, state)  # (B·R, V), (B·R, L)
        logp = _frozen(processed_log_probs(logits, history, cfg), finished)  # (B·R, V)
        vocab = logp.shape[-1]
        if sample:
            probs = warp(logp, cfg).softmax(dim=-1)  # (B·R, V); frozen rows put all mass on <pad>
            word = torch.multinomial(probs, 1, generator=generator).squeeze(1)  # (B·R,)
            rows = None  # rows never swap
            step_logp = logp.gather(1, word.unsqueeze(1)).squeeze(1)  # (B·R,)
            scores = scores + step_logp.view(b, r)
        else:
            cand = (scores.view(b * r, 1) + logp).view(b, r * vocab)  # (B, R·V)
            scores, flat = cand.topk(r, dim=-1)  # (B, R)
            beam, word = flat // vocab, (flat % vocab).view(-1)  # source row and chosen word
            rows = (base + beam).view(-1)  # (B·R,) rows to keep, never crossing images
            step_logp = logp.view(b, r * vocab).gather(1, flat).view(-1)  # (B·R,) the words' own log p
            if moves:  # one row per image (greedy): nothing moves
                state = decoder.reorder_state(state, rows)
        history = torch.cat([keep_rows(history, rows), word.unsqueeze(1)], 1)  # (B·R, t)
        logp_history = torch.cat([keep_rows(logp_history, rows), step_logp.unsqueeze(1)], 1)
        finished = keep_rows(finished, rows)
        att = keep_rows(att.float(), rows).masked_fill(finished.unsqueeze(1), 0.0)  # (B·R, L)
        att_history = (
            att.unsqueeze(1)
            if att_history is None
            else torch.cat([keep_rows(att_history, rows), att.unsqueeze(1)], 1)
        )  # (B·R, t, L)
        finished = finished | (word == end_id)
        tokens = word
        if finished.all():
            break
    lengths = (history != Vocab.pad_id).sum(1).view(b, r)  # (B, R)
    ranking = scores / lengths.clamp_min(1).float() ** cfg.length_penalty  # (B, R)
    n = cfg.num_return_sequences
    if sample:
        order = ranking.argsort(dim=-1, descending=True, stable=True)  # (B, R): best first, ties as drawn
    else:
        order = ranking.topk(n, dim=-1).indices  # (B, N) best first
    keep = (base + order).view(-1)  # (B·N,)
    return SearchOutput(
        tokens=history.index_select(0, keep),
        attention=att_history.index_select(0, keep),
        token_log_probs=logp_history.index_select(0, keep),
        log_prob=scores.gather(1, order).view(-1),
        lengths=lengths.gather(1, order).view(-1),
        score=ranking.gather(1, order).view(-1),
        num_return_sequences=n,
    )


def greedy(decoder: Decoder, features: Tensor, max_new_tokens: int = 20, **kwargs) -> SearchOutput:
    """The most likely word at each step: ``generate`` with one beam."""
    return generate(decoder, features, num_beams=1, max_new_tokens=max_new_tokens, **kwargs)


def beam_search(
    decoder: Decoder, features: Tensor, num_beams: int = 3, max_new_tokens: int = 20, **kwargs
) -> SearchOutput:
    """Batched beam search: ``generate`` with ``num_beams`` beams per image."""
    return generate(decoder, features, num_beams=num_beams, max_new_tokens=max_new_tokens, **kwargs)
