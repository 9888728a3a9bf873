"""The Show, Attend and Tell LSTM decoder (Xu et al. 2015, §3.1.2), attention passed in as a layer.

Per step t, with a_i the grid features (B, L, D), each read as [a_i; PE_i] with a fixed 2-D position
code PE (B, L, D' = D + P), and E the embedding:
  ẑ_t   = β_t · φ({a_i}, h_{t-1}),  β_t = σ(f_β(h_{t-1}))       (eq. 6 and the gating scalar of §4.2.1)
  i,f,o,g = σ,σ,σ,tanh( T [E y_{t-1}; h_{t-1}; ẑ_t] )            (eq. 1-3)
  c_t = f ⊙ c_{t-1} + i ⊙ g,   h_t = o ⊙ tanh(c_t)
  p(y_t) ∝ exp(L_o tanh(E y_{t-1} + L_h h_t + L_z ẑ_t))          (eq. 7, deep output)
h_0, c_0 = tanh(f_init(mean_i a_i)) (§3.1.2). The attention layer supplies φ and, for stochastic
attention, the log-probability and entropy of its choices, which ``forward`` collects for the loss.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from captioning.models.attention.base import AttentionLayer, AttentionOutput, CellRewards
from captioning.models.decoders.base import Decoder, DecoderOutput, State, as_state_mask
from captioning.models.position import sinusoidal_2d, square_grid_side
from captioning.models.recurrent_linear import recurrent_linear
from captioning.models.registry import register


def grid_mean(features: Tensor, mask: Tensor) -> Tensor:
    """(B, D) mean of the valid locations of ``features`` (B, L, D) under ``mask`` (B, L): one read."""
    m = mask.to(features.dtype).unsqueeze(1)  # (B, 1, L)
    return (m @ features).squeeze(1) / m.sum(-1).clamp_min(1.0)  # (B, D)


def lstm_cell(gates: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
    """The LSTM update (eq. 1-3) from the pre-activations (B, 4H), gate order i, f, g, o: (h_t, c_t)."""
    i, f, g, o = gates.chunk(4, dim=-1)  # each (B, H)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


@register
class LSTMDecoder(Decoder):
    static_keys = ("features", "keys", "mask")

    def __init__(
        self,
        attention: AttentionLayer | Callable[..., AttentionLayer],
        vocab_size: int,
        feature_dim: int,
        embed_dim: int = 128,
        hidden_dim: int = 256,
        dropout: float = 0.2,
        gate: bool = True,
        position_dim: int = 32,
        alpha_c: float = 0.0,
        entropy_c: float = 0.0,
    ):
        """``attention``: a layer, or (as the configs give it, ``_partial_: true``) a factory that takes
        ``feature_dim`` and ``query_dim``: the decoder supplies them, so no config repeats them.
        ``alpha_c``: λ of the doubly stochastic regulariser (eq. 14) on this decoder's attention; hard
        attention sets 0, since eq. 14 pulls α towards uniform, against a policy that must commit.
        ``entropy_c``: λ_E of an attention-entropy penalty λ_E · H(α_t) per target token (not in the
        paper; 0 = off): it pulls each α_t towards few cells, so the cell a word is read from is also the
        attention's peak (what an overlay shows and the grounding metric scores)."""
        super().__init__()
        self._attach_attention(attention, feature_dim, hidden_dim, position_dim, alpha_c, entropy_c)
        grid_dim = self.grid_dim
        self.vocab_size, self.embed_dim, self.hidden_dim = vocab_size, embed_dim, hidden_dim
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.init_h = nn.Linear(grid_dim, hidden_dim)
        self.init_c = nn.Linear(grid_dim, hidden_dim)
        self.gate = nn.Linear(hidden_dim, 1) if gate else None  # f_β
        # T of eq. 1-3 split by input: the embedding part runs for all steps in one matmul, the
        # recurrent part [ẑ_t; h_{t-1}] (which must wait for step t) is one matmul per step.
        self.gates_emb = nn.Linear(embed_dim, 4 * hidden_dim)
        self.gates_rec = nn.Linear(grid_dim + hidden_dim, 4 * hidden_dim, bias=False)
        # Deep output layer (eq. 7). Nothing recurrent reads it, so teacher forcing runs it once over
        # all steps.
        self.out_h = nn.Linear(hidden_dim, embed_dim)  # L_h
        self.out_z = nn.Linear(grid_dim, embed_dim, bias=False)  # L_z
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(embed_dim, vocab_size)  # L_o

    def _attach_attention(
        self,
        attention: AttentionLayer | Callable[..., AttentionLayer],
        feature_dim: int,
        query_dim: int,
        position_dim: int,
        alpha_c: float,
        entropy_c: float,
    ) -> None:
        """The attention layer (built here from a factory, checked if given), the position code's width and
        the two attention regularisers: what every recurrent decoder over [a_i; PE_i] shares."""
        # The attention and the LSTM read each location as [a_i; PE(row_i, col_i)]: a CNN's features are
        # (nearly) translation-equivariant, so a context Σ α_i a_i says *what* was attended but hardly
        # *where*, and words like "left" / "top" then have nothing to go on. The code is fixed (2-D
        # sinusoids, no parameters), so the grid needs no gradient: a learned code added to a_i made
        # backward materialise a (B, L, D) gradient at every step (~30% of a training step).
        self.position_dim = position_dim
        grid_dim = feature_dim + position_dim  # D' = D + P, what the attention layer sees per location
        if not isinstance(attention, nn.Module):
            attention = attention(feature_dim=grid_dim, query_dim=query_dim)
        if attention.feature_dim != grid_dim or attention.query_dim != query_dim:
            raise ValueError(
                f"attention layer expects features of {attention.feature_dim} and queries of "
                f"{attention.query_dim}, but the decoder gives it feature_dim + position_dim = {feature_dim} + "
                f"{position_dim} = {grid_dim} and queries of {query_dim}"
            )
        self.attention = attention
        if alpha_c < 0:
            raise ValueError(f"{type(self).__name__}: alpha_c={alpha_c} must be >= 0 (the weight of eq. 14)")
        self.alpha_c = alpha_c
        if entropy_c < 0:
            raise ValueError(
                f"{type(self).__name__}: entropy_c={entropy_c} must be >= 0 (the weight of a penalty)"
            )
        self.entropy_c = entropy_c
        self.feature_dim, self.grid_dim = feature_dim, grid_dim

    def with_positions(self, features: Tensor) -> Tensor:
        """[a_i; PE(row_i, col_i)] for the square grid: (B, L, D) -> (B, L, D + P); identity if P = 0."""
        if not self.position_dim:
            return features
        b, n_loc, _ = features.shape
        side = square_grid_side(n_loc)
        code = sinusoidal_2d(side, side, self.position_dim, device=features.device)  # (L, P)
        return torch.cat([features, code.to(features.dtype).expand(b, n_loc, -1)], dim=-1)  # (B, L, D+P)

    def init_state(self, features: Tensor, mask: Tensor | None = None) -> State:
        features = self.with_positions(features)  # (B, L, D')
        mask = as_state_mask(mask, features)  # (B, L)
        mean = grid_mean(features, mask)  # (B, D')
        return {
            "h": torch.tanh(self.init_h(mean)),  # (B, H)
            "c": torch.tanh(self.init_c(mean)),  # (B, H)
            "features": features,  # (B, L, D')
            "keys": self.attention.precompute(features),  # once per image, not per step
            "mask": mask,
        }

    def recurrent_maps(self) -> tuple[Callable[[Tensor], Tensor], ...]:
        """The per-step linear maps of training's unrolled loop, each weight's gradient one GEMM after the
        loop (``recurrent_linear``); ``_advance`` uses them in place of its layers."""
        return (recurrent_linear(self.gates_rec.weight),)

    def _advance(
        self, emb_gates: Tensor, state: State, recurrent: tuple[Callable[[Tensor], Tensor], ...] = ()
    ) -> tuple[Tensor, AttentionOutput, State]:
        """One LSTM step given the embedding's gate contribution (B, 4H); returns β_t ẑ_t (B, D').

        ``recurrent``: ``recurrent_maps()`` in training, in place of ``self.gates_rec``; empty: the layer.
        """
        h, c = state["h"], state["c"]
        att = self.attention(h, state["features"], state["keys"], state["mask"])
        z = att.context  # (B, D')
        if self.gate is not None:
            z = torch.sigmoid(self.gate(h)) * z  # β_t ẑ_t, §4.2.1
        gates_rec = recurrent[0] if recurrent else self.gates_rec
        h, c = lstm_cell(emb_gates + gates_rec(torch.cat([z, h], dim=-1)), c)  # (B, 4H) -> (B, H) each
        return z, att, {**state, "h": h, "c": c}

    def deep_output(self, emb: Tensor, h: Tensor, z: Tensor) -> Tensor:
        """Logits L_o tanh(E y_{t-1} + L_h h_t + L_z ẑ_t) (eq. 7) for (..., E), (..., H), (..., D')."""
        return self.out(self.dropout(torch.tanh(emb + self.out_h(h) + self.out_z(z))))  # (..., V)

    def compile_step(self) -> None:
        self._advance = torch.compile(self._advance, dynamic=False)  # the recurrence: forward and step

    def step(self, tokens: Tensor, state: State) -> tuple[Tensor, Tensor, State]:
        emb = self.embedding(tokens)  # (B, E)
        z, att, state = self._advance(self.gates_emb(emb), state)
        return self.deep_output(emb, state["h"], z), att.weights, state  # (B, V), (B, L)

    def forward(self, features: Tensor, tokens: Tensor, mask: Tensor | None = None) -> DecoderOutput:
        """Teacher forcing: ``tokens`` (B, T) are the inputs <start> w_1 .. w_{T-1}.

        A stochastic attention layer with ``samples_per_step`` K > 1 (several attention samples per caption,
        e.g. for a leave-one-out baseline) makes training decode every row K times, the K copies of a
        caption in adjacent rows: the output then has B·K rows and ``caption_loss`` repeats the targets.
        """
        k = self.attention.samples_per_step if self.training else 1
        if k > 1:
            features = features.repeat_interleave(k, dim=0)  # (B·K, L, D)
            tokens = tokens.repeat_interleave(k, dim=0)  # (B·K, T)
            mask = None if mask is None else mask.repeat_interleave(k, dim=0)  # (B·K, L)
        state = self.init_state(features, mask)
        emb = self.embedding(tokens)  # (B, T, E)
        emb_gates = self.gates_emb(emb).unbind(1)  # T × (B, 4H): one matmul for all steps
        recurrent = self.recurrent_maps()  # their weight gradients: one GEMM each after the loop
        hs, zs, weights, alphas, log_probs, entropies, values = [], [], [], [], [], [], []
        record = self.training and self.attention.needs_cell_rewards  # the states step t started from
        h0, cells_before = state["h"], [state["c"]]  # h_{t-1} is h0 then hs; only c needs keeping
        for t in range(tokens.shape[1]):
            z, att, state = self._advance(emb_gates[t], state, recurrent)
            if record:
                cells_before.append(state["c"])
            hs.append(state["h"])
            zs.append(z)
            weights.append(att.weights)
            alphas.append(att.alphas)
            if att.log_prob is not None:
                log_probs.append(att.log_prob)
            if att.entropy is not None:
                entropies.append(att.entropy)
            if att.value is not None:
                values.append(att.value)
        logits = self.deep_output(emb, torch.stack(hs, 1), torch.stack(zs, 1))  # (B, T, V), one matmul each
        aux = {}
        if log_probs:
            aux["location_log_prob"] = torch.stack(log_probs, 1)  # (B, T)
        if entropies:
            aux["location_entropy"] = torch.stack(entropies, 1)  # (B, T)
        if values:
            aux["location_value"] = torch.stack(values, 1)  # (B, T) learned baselines b(h_{t-1})
        if record:  # what cell_log_likelihoods reruns step t from (the state detached, the grid not)
            aux["cell_h"] = torch.stack([h0, *hs[:-1]], 1).detach()  # (B, T, H) h_{t-1}
            aux["cell_c"] = torch.stack(cells_before[:-1], 1).detach()  # (B, T, H) c_{t-1}
            aux["cell_emb"] = emb.detach()  # (B, T, E) E y_{t-1}
            aux["cell_grid"] = state["features"][::k]  # (B, L, D') one copy per image, with its graph
        return DecoderOutput(
            logits=logits, attention=torch.stack(weights, 1), alphas=torch.stack(alphas, 1), aux=aux
        )

    def start_training_batch(self) -> None:
        """Per-batch state of the attention layer (the semi-sampling coin, the Gumbel temperature)."""
        self.attention.start_training_batch()

    def cell_log_likelihoods(self, aux: dict[str, Tensor], targets: Tensor, index: Tensor) -> Tensor:
        """(B, T, C) r_t(i) = log p(y_t | s_t = i, s_{<t}) for the cells ``index`` (B, T, C): step t rerun
        from its recorded state (h_{t-1}, c_{t-1}, E y_{t-1}, detached) with a_i in place of the chosen
        context. Differentiable in the step's own weights and the grid (``estimators.exact_step_pathwise``).

        The context enters the gates and the deep output linearly and β_t depends on h_{t-1} only, so the
        grid's share of both is one matmul per image; each step then costs a (B, C, H) LSTM update and a
        (B, C, V) output. Without dropout: the same function for every cell, sampled or not."""
        grid, h_prev, c_prev, emb = aux["cell_grid"], aux["cell_h"], aux["cell_c"], aux["cell_emb"]
        images, n_loc = grid.shape[:2]
        w_z, w_h = self.gates_rec.weight.split([self.grid_dim, self.hidden_dim], dim=1)  # (4H, D'), (4H, H)
        # Per image, not per row: with K samples per caption the K rows of an image share its grid.
        grid_gates = (grid @ w_z.t()).flatten(0, 1)  # (B·L, 4H) T's context columns applied to every a_i
        grid_out = self.out_z(grid).flatten(0, 1)  # (B·L, E) L_z a_i (no bias)
        shared = self.gates_emb(emb) + h_prev @ w_h.t()  # (B·K, T, 4H) the part that does not depend on s_t
        image_of_row = torch.arange(h_prev.shape[0], device=grid.device) // (h_prev.shape[0] // images)
        flat = image_of_row.view(-1, 1, 1) * n_loc + index  # (B·K, T, C) rows of the flattened grids
        rows = []
        for t in range(targets.shape[1]):
            cells = flat[:, t]  # (B·K, C)
            h, c = h_prev[:, t], c_prev[:, t]  # (B·K, H) the state step t started from
            beta = torch.sigmoid(self.gate(h)).unsqueeze(1) if self.gate is not None else 1.0  # (B·K, 1, 1)
            gates = shared[:, t].unsqueeze(1) + beta * grid_gates[cells]  # (B·K, C, 4H)
            i, f, g, o = gates.chunk(4, dim=-1)  # each (B, C, H)
            c_all = torch.sigmoid(f) * c.unsqueeze(1) + torch.sigmoid(i) * torch.tanh(g)  # (B, C, H)
            h_all = torch.sigmoid(o) * torch.tanh(c_all)  # (B, C, H) h_t had s_t been cell i
            logits = self.out(torch.tanh(emb[:, t].unsqueeze(1) + self.out_h(h_all) + beta * grid_out[cells]))
            target = targets[:, t].view(-1, 1, 1).expand(-1, cells.shape[1], 1)  # (B, C, 1)
            rows.append(logits.float().log_softmax(-1).gather(-1, target).squeeze(-1))  # (B, C)
        return torch.stack(rows, 1)  # (B, T, C)

    def auxiliary_loss(
        self, output: DecoderOutput, token_logp: Tensor, token_mask: Tensor, targets: Tensor | None = None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        if "location_log_prob" not in output.aux:
            return token_logp.new_zeros(()), {}
        cells = None
        if "cell_h" in output.aux:
            if targets is None:
                raise ValueError("LSTMDecoder.auxiliary_loss: credit='exact_step' needs the targets (B, T)")
            chosen = output.attention.argmax(-1)  # (B, T) the sampled cells (one-hot rows)
            index = self.attention.cells_to_rescore(output.alphas, chosen)  # (B, T, C)
            cells = CellRewards(index, self.cell_log_likelihoods(output.aux, targets, index))
        # (B, T) log p(y_t | ...): their sum is the reward log p(y | s, a) of Xu et al. eq. 10; a layer may
        # credit each location with part of it (ReinforceHardAttention(credit="remaining")).
        return self.attention.auxiliary_loss(
            output.aux["location_log_prob"],
            output.aux["location_entropy"],
            token_logp * token_mask,
            token_mask,
            output.aux.get("location_value"),
            output.alphas,
            cells,
        )
