"""Multi-head scaled dot-product attention on the fused kernel, and its use as an LSTM attention layer.

Attention(Q, K, V) = softmax(Q Kᵀ / √d + mask) V, per head (Vaswani et al. 2017).

``MultiHeadSDPA`` serves the Transformer decoder for both causal self-attention and cross-attention over
the encoder grid. Q, K and V come from one packed projection W_in = [W_q; W_k; W_v]: self-attention
uses it in a single matmul, cross-attention uses the W_q rows on the tokens and the [W_k; W_v] rows on
the grid (computed once per image). The attention itself is
``torch.nn.functional.scaled_dot_product_attention``, so a GPU picks a flash / memory-efficient kernel
and autocast (bf16) needs nothing here. Those kernels return no weights, so ``attention_weights`` is
the explicit softmax(Q Kᵀ / √d) path, run only when a caller asks for the weights; the attention
*output* always comes from the fused kernel, so asking for weights never changes it.

``MultiHeadAttention`` is the same multi-head scoring as an ``AttentionLayer`` for the LSTM decoder
(``model/decoder/attention=multihead``), see its docstring.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from captioning.models.attention.base import AttentionLayer, AttentionOutput, attend, per_image
from captioning.models.registry import register


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """(B, T, h·d) -> (B, h, T, d)."""
    b, t, dim = x.shape
    return x.view(b, t, num_heads, dim // num_heads).transpose(1, 2)  # (B, T, h, d) -> (B, h, T, d)


def merge_heads(x: Tensor) -> Tensor:
    """(B, h, T, d) -> (B, T, h·d)."""
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)  # (B, T, h, d) -> (B, T, h·d)


def fold_rows(q: Tensor, images: int) -> Tensor:
    """(B·K, h, T, d) -> (B, h, K·T, d): an image's K adjacent rows as K·T queries of that image."""
    n, h, t, d = q.shape
    return q.view(images, n // images, h, t, d).transpose(1, 2).reshape(images, h, -1, d)  # (B, h, K·T, d)


def unfold_rows(x: Tensor, rows: int) -> Tensor:
    """Inverse of ``fold_rows``: (B, h, K·T, e) -> (B·K, h, T, e)."""
    b, h, kt, e = x.shape
    k = rows // b
    return x.view(b, h, k, kt // k, e).transpose(1, 2).reshape(rows, h, kt // k, e)  # (B·K, h, T, e)


def _key_mask(mask: Tensor | None, t: int, s: int, is_causal: bool, device: torch.device) -> Tensor | None:
    """A boolean (B or 1, 1, T, S) mask, True where a query may attend, from a (B, S) key mask and/or
    causality (top-left aligned, as SDPA's ``is_causal``: query i sees keys 0..i)."""
    out = None if mask is None else mask.bool()[:, None, None, :]  # (B, 1, 1, S)
    if is_causal:
        causal = torch.ones(t, s, dtype=torch.bool, device=device).tril()  # (T, S)
        out = causal[None, None] if out is None else out & causal
    return out


def _float_mask(
    bias: Tensor, mask: Tensor | None, t: int, s: int, is_causal: bool, dtype: torch.dtype
) -> Tensor:
    """An additive (B or 1, h, T, S) mask: ``bias`` (h, T, S) with -inf wherever ``_key_mask`` forbids."""
    out = bias.to(dtype)[None]  # (1, h, T, S)
    allowed = _key_mask(mask, t, s, is_causal, bias.device)  # (B or 1, 1, T, S) or None
    return out if allowed is None else out.masked_fill(~allowed, float("-inf"))


def fused_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    bias: Tensor | None = None,
) -> Tensor:
    """SDPA on q (B, h, T, d), k (B, h, S, d), v (B, h, S, dv); ``mask`` (B, S) True on valid keys;
    ``bias`` (h, T, S) an additive score bias (e.g. ``position.alibi_bias``) or None.

    Returns (B, h, T, dv). With no key mask and no bias, ``is_causal`` is passed through so flash
    attention can serve it; SDPA rejects a mask together with ``is_causal``, so then they are combined here.
    A float bias rules out the flash kernel on a GPU (the memory-efficient one takes it): ALiBi costs that.
    """
    if bias is not None:
        attn_mask = _float_mask(bias, mask, q.shape[-2], k.shape[-2], is_causal, q.dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=is_causal)
    attn_mask = _key_mask(mask, q.shape[-2], k.shape[-2], is_causal, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)


def attention_weights(
    q: Tensor, k: Tensor, mask: Tensor | None = None, is_causal: bool = False, bias: Tensor | None = None
) -> Tensor:
    """The explicit path: softmax(q kᵀ / √d + bias) with the same masking as ``fused_attention`` ->
    (B, h, T, S).

    Masked keys get exactly zero weight. The softmax runs in float32 (bf16 under autocast would round
    the weights visibly) and the result is returned in the scores' dtype.
    """
    scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5  # (B, h, T, d) @ (B, h, d, S) -> (B, h, T, S)
    if bias is not None:
        scores = scores + bias.to(scores.dtype)  # (h, T, S) broadcast over B; -inf on future keys
    allowed = _key_mask(mask, q.shape[-2], k.shape[-2], is_causal, q.device)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)


class MultiHeadSDPA(nn.Module):
    """Multi-head attention of ``embed_dim`` split into ``num_heads`` heads, packed projections."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(
                f"MultiHeadSDPA: embed_dim={embed_dim} is not divisible by num_heads={num_heads}"
            )
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.in_proj = nn.Linear(embed_dim, 3 * embed_dim, bias=bias)  # packed [W_q; W_k; W_v]
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)  # W_o

    def _packed(self, x: Tensor, rows: slice, n: int) -> tuple[Tensor, ...]:
        """Apply rows ``rows`` of W_in to x (B, T, D) and split into n tensors of heads (B, h, T, d)."""
        bias = None if self.in_proj.bias is None else self.in_proj.bias[rows]
        y = F.linear(x, self.in_proj.weight[rows], bias)  # (B, T, n·D)
        b, t, _ = y.shape
        y = y.view(b, t, n, self.num_heads, self.embed_dim // self.num_heads)  # (B, T, n, h, d)
        return y.permute(2, 0, 3, 1, 4).unbind(0)  # n x (B, h, T, d)

    def project_qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention: q, k, v (B, h, T, d) of x (B, T, D) in one matmul."""
        q, k, v = self._packed(x, slice(None), 3)
        return q, k, v

    def project_q(self, x: Tensor) -> Tensor:
        """Cross-attention queries (B, h, T, d) of the tokens x (B, T, D)."""
        return self._packed(x, slice(0, self.embed_dim), 1)[0]

    def project_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Cross-attention keys and values (B, h, S, d) of the grid (B, S, D): once per image."""
        k, v = self._packed(memory, slice(self.embed_dim, None), 2)
        return k, v

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        bias: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Output (B, T, D) through the fused kernel, plus the weights (B, h, T, S) only if asked;
        ``bias`` (h, T, S) is added to the scores (self-attention only).

        q may have K rows per row of k, v and mask (beam search over a per-image memory): the K rows of
        an image then attend as K·T queries of that image, so the memory is never copied per beam.
        """
        p = self.dropout if self.training else 0.0
        rows, images = q.shape[0], k.shape[0]
        if rows != images:
            if is_causal or bias is not None:
                raise ValueError("MultiHeadSDPA: K query rows per key row is for cross-attention only")
            q = fold_rows(q, images)  # (B·K, h, T, d) -> (B, h, K·T, d)
        out = fused_attention(q, k, v, mask, is_causal, p, bias)  # (B, h, K·T, d)
        weights = attention_weights(q, k, mask, is_causal, bias) if need_weights else None  # (B, h, K·T, S)
        if rows != images:
            out = unfold_rows(out, rows)  # (B·K, h, T, d)
            weights = None if weights is None else unfold_rows(weights, rows)  # (B·K, h, T, S)
        return self.out_proj(merge_heads(out)), weights  # (B·K, T, D)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Self-attention over x (B, T, D) when ``memory`` is None, else cross-attention to memory (B, S, D)."""
        if memory is None:
            q, k, v = self.project_qkv(x)
        else:
            q, (k, v) = self.project_q(x), self.project_kv(memory)
        return self.attend(q, k, v, mask, is_causal, need_weights)


@register
class MultiHeadAttention(AttentionLayer):
    """Multi-head dot-product attention for the LSTM: h heads score the grid from the hidden state.

    e^h_ti = (W_q h_{t-1})_h · (W_k a_i)_h / √d,   α^h_t = softmax_i(e^h_t),   ᾱ_t = mean_h α^h_t
    ẑ_t    = mean_h Σ_i α^h_ti a_i = Σ_i ᾱ_ti a_i

    The values are the annotation vectors themselves (no value/output projection), so averaging the heads
    for the overlay is exact: ``weights`` = ᾱ_t is the distribution actually applied to the grid, as the
    regulariser (eq. 14) and the attention overlays assume. The LSTM consumes the weights at every
    step, so the explicit ``attention_weights`` path is the whole computation here (the fused kernel
    would only repeat the scoring). W_k a_i is computed once per image by ``precompute``.
    """

    def __init__(self, feature_dim: int, query_dim: int, num_heads: int = 4, attention_dim: int = 128):
        super().__init__()
        if attention_dim % num_heads:
            raise ValueError(
                f"MultiHeadAttention: attention_dim={attention_dim} is not divisible by num_heads={num_heads}"
            )
        self.feature_dim, self.query_dim = feature_dim, query_dim
        self.num_heads, self.attention_dim = num_heads, attention_dim
        self.query_proj = nn.Linear(query_dim, attention_dim)  # W_q
        self.key_proj = nn.Linear(feature_dim, attention_dim)  # W_k

    def precompute(self, features: Tensor) -> Tensor:
        return split_heads(self.key_proj(features), self.num_heads)  # (B, L, A) -> (B, h, L, d)

    def head_alphas(self, query: Tensor, keys: Tensor, mask: Tensor | None = None) -> Tensor:
        """Per-head distributions α^h_t (B·K, h, L) for the query (B·K, H); keys (B, h, L, d), mask (B, L)."""
        q = per_image(self.query_proj(query), keys.shape[0])  # (B, K, A): K query rows (beams) per image
        q = split_heads(q, self.num_heads)  # (B, h, K, d)
        return attention_weights(q, keys, mask).transpose(1, 2).flatten(0, 1)  # (B, h, K, L) -> (B·K, h, L)

    def forward(
        self, query: Tensor, features: Tensor, keys: Tensor, mask: Tensor | None = None
    ) -> AttentionOutput:
        alphas = self.head_alphas(query, keys, mask).mean(1)  # (B·K, L), heads averaged
        return AttentionOutput(context=attend(alphas, features), weights=alphas, alphas=alphas)
