"""A Transformer caption decoder (pre-LayerNorm) over the encoder grid, with a KV cache for decoding.

memory = LN(W_m a + P2d)                      the grid (B, L, D) in model width, with 2-D positions
memory = LN(Enc(memory))  (memory_layers > 0)  optional pre-LN self-attention layers over the cells
x_0    = √D · E y + P1d                       token embeddings with 1-D positions (``token_positions``)
x     += SelfAttn(LN x)  (causal)             per layer (Xiong et al. 2020 pre-LN ordering);
                                              with ``alibi`` its scores get -m_h·(i - j) (Press et al. 2022)
x     += CrossAttn(LN x, memory)
x     += FF(LN x)
logits = W_o LN(x_N)                          W_o tied to E when ``tie_embeddings``

Decoding runs one token per ``step``. With ``use_cache`` the state holds every layer's self-attention
keys/values (B, h, t, d), grown by one position per step, and the cross-attention keys/values
(B, h, L, d), computed once per image and listed in ``static_keys`` so beam search never copies them;
beam reselection reorders the growing caches through ``reorder_state``. Without the cache each step
reruns the whole prefix (the teacher-forcing path, cross keys/values included): the reference the
cache is tested and benchmarked against.

The attention returned per token is one layer's cross-attention (``attention_layer``, default the
last), averaged over heads or one ``attention_head``. It comes from the explicit softmax(QKᵀ/√d)
path of that layer only; every output still goes through the fused kernel. In ``forward`` these
weights are detached, and the decoder has no doubly stochastic regulariser (Xu et al. eq. 14 is
meant for the LSTM's single attention; ``alpha_c`` stays the base class's 0).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from captioning.models.attention.multihead import MultiHeadSDPA
from captioning.models.decoders.base import Decoder, DecoderOutput, State, as_state_mask
from captioning.models.position import alibi_bias, sinusoidal_1d, sinusoidal_2d, square_grid_side
from captioning.models.registry import register

KV = tuple[Tensor, Tensor]  # keys, values (B, h, S, d)


def feed_forward(dim: int, ff_dim: int, dropout: float) -> nn.Sequential:
    return nn.Sequential(nn.Linear(dim, ff_dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(ff_dim, dim))


class MemoryLayer(nn.Module):
    """A pre-LN encoder layer over the grid (Vaswani et al.'s encoder, as captioning Transformers put over
    image regions): every cell attends to every cell, so a cell can carry what its object looks like
    beyond its own receptive field before the decoder's cross-attention reads it."""

    def __init__(self, dim: int, num_heads: int, ff_dim: int, dropout: float):
        super().__init__()
        self.norm_self, self.self_attn = nn.LayerNorm(dim), MultiHeadSDPA(dim, num_heads, dropout)
        self.norm_ff, self.ff = nn.LayerNorm(dim), feed_forward(dim, ff_dim, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        """x (B, L, D), ``mask`` (B, L) True on valid cells (or None) -> (B, L, D)."""
        q, k, v = self.self_attn.project_qkv(self.norm_self(x))  # (B, h, L, d) each
        out, _ = self.self_attn.attend(q, k, v, mask=mask)  # (B, L, D): no causality among cells
        x = x + self.dropout(out)
        return x + self.dropout(self.ff(self.norm_ff(x)))


class DecoderLayer(nn.Module):
    def __init__(self, dim: int, num_heads: int, ff_dim: int, dropout: float):
        super().__init__()
        self.norm_self, self.self_attn = nn.LayerNorm(dim), MultiHeadSDPA(dim, num_heads, dropout)
        self.norm_cross, self.cross_attn = nn.LayerNorm(dim), MultiHeadSDPA(dim, num_heads, dropout)
        self.norm_ff, self.ff = nn.LayerNorm(dim), feed_forward(dim, ff_dim, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: Tensor,
        cross: KV,
        mask: Tensor | None,
        past: KV | None = None,
        need_weights: bool = False,
        bias: Tensor | None = None,
    ) -> tuple[Tensor, KV, Tensor | None]:
        """x (B, T, D): T new positions after the t positions of ``past`` (t = 0 unless T = 1);
        ``bias`` (h, T, t + T) is added to the self-attention scores (``alibi_bias``) or None.

        Returns the new x, the self-attention keys/values of all t + T positions, and the
        cross-attention weights (B, h, T, L) when ``need_weights``.
        """
        q, k, v = self.self_attn.project_qkv(self.norm_self(x))  # (B, h, T, d) each
        if past is not None and past[0].shape[2] > 0:
            if x.shape[1] != 1:
                raise ValueError(
                    f"DecoderLayer: with a KV cache, feed one token at a time (got {x.shape[1]})"
                )
            k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)  # (B, h, t+1, d)
        # A single new query may see every cached position: only a full prefix needs the causal mask.
        out, _ = self.self_attn.attend(q, k, v, is_causal=x.shape[1] > 1, bias=bias)
        x = x + self.dropout(out)
        q = self.cross_attn.project_q(self.norm_cross(x))
        out, weights = self.cross_attn.attend(q, *cross, mask=mask, need_weights=need_weights)
        x = x + self.dropout(out)
        x = x + self.dropout(self.ff(self.norm_ff(x)))
        return x, (k, v), weights


@register
class TransformerDecoder(Decoder):
    def __init__(
        self,
        vocab_size: int,
        feature_dim: int,
        embed_dim: int = 128,
        ff_dim: int = 512,
        num_layers: int = 2,
        num_heads: int = 4,
        dropout: float = 0.1,
        tie_embeddings: bool = True,
        use_cache: bool = True,
        attention_layer: int = -1,
        attention_head: int | None = None,
        position_dim: int = 0,
        memory_layers: int = 0,
        alibi: bool = True,
        alibi_base: float = 8.0,
        token_positions: bool = True,
        learned_positions: int = 0,
    ):
        """``embed_dim`` is the model width D, ``ff_dim`` the feed-forward width (``hidden_dim`` in checkpoints
        before 0.3, renamed on load: the LSTM's ``hidden_dim`` is its state). ``position_dim`` P:
        0 adds a D-wide 2-D sinusoid code to the projected grid (Vaswani/DETR style); P > 0 concatenates
        a P-wide one to every cell before the projection, [a_i; PE_i] as the LSTM decoder reads the grid,
        so the projection learns how much "where" weighs against "what". ``memory_layers``: encoder layers
        (self-attention + feed-forward, pre-LN, then a final LayerNorm) over the grid before the decoder
        reads it; 0 reads the projected grid as it is. ``alibi``: every self-attention score of query i on
        token j gets -m_h·(i - j), head h's slope m_h = 2^(-b·h/H) with b = ``alibi_base`` (Press et al.
        2022 use 8; smaller is more local), on top of the 1-D sinusoids, so some heads read mostly the
        current phrase ("a big red circle") and the query for its position word is not a mix of both
        objects' words. ``token_positions``: add the 1-D sinusoids to the token embeddings; False leaves
        the tokens without absolute positions (with ``alibi``, as Press et al. use it: distance enters
        only as the recency bias, so no word can be predicted from its index in the caption; without
        it, the causal mask alone tells order, "NoPE", Kazemnejad et al. 2023). ``learned_positions`` G > 0:
        learned row and column embeddings (G rows, G columns, D wide each; grids up to G x G) summed into
        the cell's position code in place of the 2-D sinusoid (the learned variant of DETR / ViT), so the
        code of "top left" is whatever the captions need rather than a fixed sinusoid, most of whose
        low frequencies barely change over a 12-cell side."""
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(
                f"TransformerDecoder: embed_dim={embed_dim} not divisible by num_heads={num_heads}"
            )
        if embed_dim % 4:
            raise ValueError(
                f"TransformerDecoder: embed_dim={embed_dim} must be divisible by 4 (2-D positions)"
            )
        if not -num_layers <= attention_layer < num_layers:
            raise ValueError(
                f"TransformerDecoder: attention_layer={attention_layer} outside {num_layers} layers"
            )
        if attention_head is not None and not 0 <= attention_head < num_heads:
            raise ValueError(f"TransformerDecoder: attention_head={attention_head} outside {num_heads} heads")
        self.vocab_size, self.feature_dim = vocab_size, feature_dim
        self.embed_dim, self.ff_dim, self.num_heads = embed_dim, ff_dim, num_heads
        self.use_cache, self.alibi, self.alibi_base = use_cache, alibi, alibi_base
        self.token_positions = token_positions
        if alibi and alibi_base <= 0:
            raise ValueError(f"TransformerDecoder: alibi_base={alibi_base} must be positive")
        self.attention_layer, self.attention_head = attention_layer % num_layers, attention_head
        heads = "mean over" if attention_head is None else f"head {attention_head} of"
        self.attention_map_label = (  # the map returned per token: one layer's cross-attention
            f"cross-attention of layer {self.attention_layer + 1} of {num_layers}, {heads} {num_heads} heads"
        )
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        nn.init.normal_(self.embedding.weight, std=embed_dim**-0.5)  # unit scale after the √D factor
        if position_dim < 0 or position_dim % 4:
            raise ValueError(
                f"TransformerDecoder: position_dim={position_dim} must be 0 or a positive multiple of 4"
            )
        self.position_dim = position_dim
        if learned_positions < 0 or (learned_positions and position_dim):
            raise ValueError(
                f"TransformerDecoder: learned_positions={learned_positions} must be 0 or a grid side > 0, and "
                f"needs position_dim=0 (got {position_dim}): the learned code replaces the sinusoid"
            )
        self.learned_positions = learned_positions
        if learned_positions:
            self.row_positions = nn.Embedding(learned_positions, embed_dim)  # (G, D)
            self.col_positions = nn.Embedding(learned_positions, embed_dim)  # (G, D)
            for table in (self.row_positions, self.col_positions):
                nn.init.normal_(table.weight, std=0.5)  # sum ~ the unit scale of the sinusoid it replaces
        self.memory_proj = nn.Linear(feature_dim + position_dim, embed_dim)
        self.memory_norm = nn.LayerNorm(embed_dim)
        if memory_layers < 0:
            raise ValueError(f"TransformerDecoder: memory_layers={memory_layers} must be 0 or more")
        self.memory_layers = nn.ModuleList(
            MemoryLayer(embed_dim, num_heads, ff_dim, dropout) for _ in range(memory_layers)
        )
        # pre-LN layers leave their residual stream unnormalised: one LayerNorm after the last
        self.memory_final_norm = nn.LayerNorm(embed_dim) if memory_layers else nn.Identity()
        self.layers = nn.ModuleList(
            DecoderLayer(embed_dim, num_heads, ff_dim, dropout) for _ in range(num_layers)
        )
        self.final_norm = nn.LayerNorm(embed_dim)  # pre-LN leaves the residual stream unnormalised
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(embed_dim, vocab_size)
        if tie_embeddings:
            self.out.weight = self.embedding.weight  # (V, D) shared
        # Per-image entries of the decoding state: expanded once for beams, never reordered.
        cross = (f"cross_{kv}{i}" for i in range(num_layers) for kv in "kv")
        self.static_keys = ("mask", "memory", *cross)

    # -- pieces --------------------------------------------------------------------------------------
    def encode_memory(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        """The grid (B, L, F) in model width with 2-D positions, through the memory layers -> (B, L, D);
        ``mask`` (B, L) True on valid cells, or None when all are."""
        side = square_grid_side(features.shape[1])
        if self.position_dim:
            pos = sinusoidal_2d(side, side, self.position_dim, features.device).to(features.dtype)  # (L, P)
            grid = torch.cat([features, pos.expand(features.shape[0], -1, -1)], dim=-1)  # (B, L, F + P)
            memory = self.memory_norm(self.memory_proj(grid))  # (B, L, D)
        else:
            pos = self.grid_positions(side, features.device)  # (L, D)
            projected = self.memory_proj(features)  # (B, L, D)
            memory = self.memory_norm(
                projected + pos.to(projected.dtype)
            )  # float32 codes: the weights' dtype
        for layer in self.memory_layers:
            memory = layer(memory, mask)  # (B, L, D)
        return self.memory_final_norm(memory)

    def grid_positions(self, side: int, device: torch.device) -> Tensor:
        """The D-wide position code of every cell of a side x side grid, row-major -> (L, D)."""
        if not self.learned_positions:
            return sinusoidal_2d(side, side, self.embed_dim, device)  # (L, D)
        if side > self.learned_positions:
            raise ValueError(
                f"TransformerDecoder: a {side}x{side} grid, but learned_positions={self.learned_positions} "
                "covers grids up to that side; train with learned_positions >= the encoder's grid_size"
            )
        index = torch.arange(side, device=device)  # (side,)
        rows = self.row_positions(index).unsqueeze(1)  # (side, 1, D)
        cols = self.col_positions(index).unsqueeze(0)  # (1, side, D)
        return (rows + cols).reshape(side * side, -1)  # (side, side, D) -> (L, D), row-major

    def embed(self, tokens: Tensor, start: int = 0) -> Tensor:
        """Tokens (B, T) at positions start .. start+T-1 -> (B, T, D)."""
        x = self.embedding(tokens) * math.sqrt(self.embed_dim)  # (B, T, D)
        if self.token_positions:
            positions = torch.arange(start, start + tokens.shape[1], device=tokens.device)  # (T,)
            x = x + sinusoidal_1d(positions, self.embed_dim).to(x.dtype)  # (B, T, D); bf16 weights stay bf16
        return self.dropout(x)

    def _select(self, weights: Tensor) -> Tensor:
        """(B, h, T, L) -> (B, T, L): the chosen head, or the mean over heads."""
        return weights.mean(1) if self.attention_head is None else weights[:, self.attention_head]

    def _run(
        self, x: Tensor, cross: list[KV], mask: Tensor | None, past: list[KV] | None = None
    ) -> tuple[Tensor, list[KV], Tensor]:
        """All layers on x (B, T, D) -> (final hidden (B, T, D), self-attention K/V per layer, (B, T, L))."""
        caches, chosen, bias = [], None, None
        if self.alibi:
            start = 0 if past is None else past[0][0].shape[2]  # tokens already in the KV cache
            bias = alibi_bias(self.num_heads, x.shape[1], start, x.device, self.alibi_base)  # (h, T, start+T)
        for i, layer in enumerate(self.layers):
            need = i == self.attention_layer
            past_i = None if past is None else past[i]
            x, kv, weights = layer(x, cross[i], mask, past_i, need_weights=need, bias=bias)
            caches.append(kv)
            chosen = weights if need else chosen
        return self.final_norm(x), caches, self._select(chosen)

    @staticmethod
    def _key_mask(mask: Tensor | None, features: Tensor) -> Tensor | None:
        """The (B, L) grid mask, or None when every location is valid: flash attention takes no mask."""
        if mask is None:
            return None
        mask = as_state_mask(mask, features)  # checks the shape
        return None if bool(mask.all()) else mask

    # -- the Decoder interface --------------------------------------------------------------------------
    def forward(self, features: Tensor, tokens: Tensor, mask: Tensor | None = None) -> DecoderOutput:
        """Teacher forcing over ``tokens`` (B, T) = <start> w_1 .. w_{T-1}, all positions at once."""
        mask = self._key_mask(mask, features)
        memory = self.encode_memory(features, mask)  # (B, L, D)
        cross = [layer.cross_attn.project_kv(memory) for layer in self.layers]
        hidden, _, attention = self._run(self.embed(tokens), cross, mask)
        attention = attention.detach()  # (B, T, L), for overlays and the (inert) eq. 14 term
        return DecoderOutput(logits=self.out(hidden), attention=attention, alphas=attention)

    def init_state(self, features: Tensor, mask: Tensor | None = None) -> State:
        b = features.shape[0]
        state: State = {}
        key_mask = self._key_mask(mask, features)
        if key_mask is not None:  # absent when all valid, see _key_mask
            state["mask"] = key_mask
        memory = self.encode_memory(features, key_mask)  # (B, L, D)
        if not self.use_cache:
            return {**state, "memory": memory, "prefix": features.new_zeros(b, 0, dtype=torch.long)}
        d = self.embed_dim // self.num_heads
        empty = memory.new_zeros(b, self.num_heads, 0, d)  # (B, h, 0, d): no token yet
        for i, layer in enumerate(self.layers):
            state[f"cross_k{i}"], state[f"cross_v{i}"] = layer.cross_attn.project_kv(memory)  # (B, h, L, d)
            state[f"self_k{i}"], state[f"self_v{i}"] = empty, empty
        return state

    def step(self, tokens: Tensor, state: State) -> tuple[Tensor, Tensor, State]:
        """Next-token logits (B, V) and cross-attention (B, L) after feeding ``tokens`` (B,)."""
        mask = state.get("mask")
        if not self.use_cache:
            prefix = torch.cat([state["prefix"], tokens.unsqueeze(1)], 1)  # (B, t+1)
            cross = [layer.cross_attn.project_kv(state["memory"]) for layer in self.layers]
            hidden, _, attention = self._run(self.embed(prefix), cross, mask)
            return self.out(hidden[:, -1]), attention[:, -1], {**state, "prefix": prefix}
        n = len(self.layers)
        past = [(state[f"self_k{i}"], state[f"self_v{i}"]) for i in range(n)]
        cross = [(state[f"cross_k{i}"], state[f"cross_v{i}"]) for i in range(n)]
        x = self.embed(tokens.unsqueeze(1), start=past[0][0].shape[2])  # (B, 1, D) at position t
        hidden, caches, attention = self._run(x, cross, mask, past)
        new = {f"self_{kv}{i}": t for i, pair in enumerate(caches) for kv, t in zip("kv", pair)}
        return self.out(hidden[:, 0]), attention[:, 0], {**state, **new}
