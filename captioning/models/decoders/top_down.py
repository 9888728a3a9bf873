"""The top-down captioning decoder of Anderson et al. 2018 (§3.2, "Bottom-Up and Top-Down Attention"),
attention passed in as a layer, over the same grid [a_i; PE_i] as the Show, Attend and Tell LSTM.

Two LSTMs per step. The first, the *attention LSTM*, sees the whole image's mean, the language LSTM's last
state and the previous word; its state is the attention's query. The second, the *language LSTM*, reads
the attended context and the first's state; its state alone gives the word:
  h¹_t = LSTM¹([h²_{t-1}; ā; E y_{t-1}], h¹_{t-1})      (eq. 2; ā = mean_i a_i)
  ẑ_t  = φ({a_i}, h¹_t)                                  (eq. 3-5: α_t = softmax(w_a^T tanh(W_a a_i + W_h h¹_t)))
  h²_t = LSTM²([ẑ_t; h¹_t], h²_{t-1})                     (eq. 6)
  p(y_t) = softmax(W_p h²_t + b_p)                        (eq. 7)
Against Show, Attend and Tell the query is formed *after* this step's word is seen (h¹_t, not h_{t-1})
and the context reaches the word through a second recurrence instead of the deep output layer (eq. 7 of
Xu et al.). The state starts at zero (the paper's code); the image enters through ā at every step.

The state's ``h`` / ``c`` are the language LSTM's (h², c²: what the word is read from), ``h_att`` /
``c_att`` the attention LSTM's. The teacher-forcing loop, ``step``, the attention regularisers and the
stochastic layers' loss terms are ``LSTMDecoder``'s; only the cell and the output differ.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from captioning.models.attention.base import AttentionLayer, AttentionOutput
from captioning.models.decoders.base import Decoder, State, as_state_mask
from captioning.models.decoders.lstm import LSTMDecoder, grid_mean, lstm_cell
from captioning.models.recurrent_linear import recurrent_linear
from captioning.models.registry import register


@register
class TopDownDecoder(LSTMDecoder):  # static_keys are LSTMDecoder's: features, keys, mask
    def __init__(
        self,
        attention: AttentionLayer | Callable[..., AttentionLayer],
        vocab_size: int,
        feature_dim: int,
        embed_dim: int = 128,
        hidden_dim: int = 256,
        dropout: float = 0.2,
        position_dim: int = 32,
        alpha_c: float = 0.0,
        entropy_c: float = 0.0,
    ):
        """Arguments as ``LSTMDecoder``'s; ``hidden_dim`` H is the width of both LSTMs. No gating scalar β
        (not in the top-down model). Attention layers that rescore every cell by rerunning a step
        (``rescores_cells``: REINFORCE's ``credit=exact_step``) are refused: that rerun is the
        Show, Attend and Tell cell's (``LSTMDecoder.cell_log_likelihoods``)."""
        # LSTMDecoder.__init__ is skipped on purpose: its layers are the one-LSTM cell's. What the two
        # decoders share (attention, position code, regularisers) is attached by the same method.
        Decoder.__init__(self)
        self._attach_attention(attention, feature_dim, hidden_dim, position_dim, alpha_c, entropy_c)
        if self.attention.rescores_cells:
            raise ValueError(
                f"TopDownDecoder: attention {type(self.attention).__name__} rescores cells by rerunning the "
                "Show, Attend and Tell step (REINFORCE's credit=exact_step), a step this decoder does not have; "
                "use model.decoder.attention.credit=remaining (or caption), or model/decoder=hard_reinforce"
            )
        grid_dim = self.grid_dim
        self.vocab_size, self.embed_dim, self.hidden_dim = vocab_size, embed_dim, hidden_dim
        self.gate = None  # no gating scalar β_t (an attribute LSTMDecoder's methods read)
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        # LSTM¹'s input split by how often it changes: E y_{t-1} for all steps in one matmul (with the
        # bias), ā once per image, [h²_{t-1}; h¹_{t-1}] once per step.
        self.gates_emb = nn.Linear(embed_dim, 4 * hidden_dim)
        self.gates_mean = nn.Linear(grid_dim, 4 * hidden_dim, bias=False)
        self.gates_rec = nn.Linear(2 * hidden_dim, 4 * hidden_dim, bias=False)
        # LSTM²: [ẑ_t; h¹_t; h²_{t-1}] -> its gates, one matmul per step.
        self.lang_rec = nn.Linear(grid_dim + 2 * hidden_dim, 4 * hidden_dim, bias=False)
        self.lang_bias = nn.Parameter(torch.zeros(4 * hidden_dim))
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden_dim, vocab_size)  # W_p, b_p (eq. 7)

    def init_state(self, features: Tensor, mask: Tensor | None = None) -> State:
        features = self.with_positions(features)  # (B, L, D')
        mask = as_state_mask(mask, features)  # (B, L)
        zeros = features.new_zeros(features.shape[0], self.hidden_dim)  # (B, H)
        return {
            "h": zeros,  # h², the language LSTM's
            "c": zeros,
            "h_att": zeros,  # h¹, the attention LSTM's
            "c_att": zeros,
            # W ā: the image's share of LSTM¹'s gates, the same at every step. Per row, not static: beam
            # search then expands it with the recurrent state (a (B·K, 4H) add per step needs no regrouping).
            "mean_gates": self.gates_mean(grid_mean(features, mask)),  # (B, 4H)
            "features": features,  # (B, L, D')
            "keys": self.attention.precompute(features),  # once per image, not per step
            "mask": mask,
        }

    def recurrent_maps(self) -> tuple[Callable[[Tensor], Tensor], ...]:
        return recurrent_linear(self.gates_rec.weight), recurrent_linear(self.lang_rec.weight)

    def _advance(
        self, emb_gates: Tensor, state: State, recurrent: tuple[Callable[[Tensor], Tensor], ...] = ()
    ) -> tuple[Tensor, AttentionOutput, State]:
        """One step of both LSTMs given E y_{t-1}'s share of LSTM¹'s gates (B, 4H); returns ẑ_t (B, D')."""
        gates_rec, lang_rec = recurrent or (self.gates_rec, self.lang_rec)
        h_lang, c_lang = state["h"], state["c"]  # (B, H) h²_{t-1}, c²_{t-1}
        att_in = torch.cat([h_lang, state["h_att"]], dim=-1)  # (B, 2H) [h²_{t-1}; h¹_{t-1}]
        h_att, c_att = lstm_cell(emb_gates + state["mean_gates"] + gates_rec(att_in), state["c_att"])  # eq. 2
        att = self.attention(h_att, state["features"], state["keys"], state["mask"])  # eq. 3-5, query h¹_t
        z = att.context  # (B, D')
        lang_in = torch.cat([z, h_att, h_lang], dim=-1)  # (B, D' + 2H) [ẑ_t; h¹_t] and h²_{t-1}
        h_lang, c_lang = lstm_cell(lang_rec(lang_in) + self.lang_bias, c_lang)  # eq. 6
        return z, att, {**state, "h": h_lang, "c": c_lang, "h_att": h_att, "c_att": c_att}

    def deep_output(self, emb: Tensor, h: Tensor, z: Tensor) -> Tensor:
        """Logits W_p h²_t + b_p (eq. 7) for (..., H); the word embedding and context enter only through
        the two LSTMs (the signature is LSTMDecoder's, whose loop calls it)."""
        return self.out(self.dropout(h))  # (..., V)
