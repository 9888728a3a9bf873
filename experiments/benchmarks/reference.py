"""Straightforward reference implementations, for the benchmark's speed-up ratios and equality tests.

``ReferenceSoftLSTM`` computes exactly the same function as ``LSTMDecoder`` with ``AdditiveAttention``
(it reads the same parameters), written the way popular implementations write it: the attention keys
W_k·a_i are recomputed at every time step, and the embedding gates and the output layer run one step
at a time. Its ``init_state / step`` do the same for decoding, and ``per_image_beam_search`` runs beam
search one image at a time over it: the straightforward beam search, same algorithm, same captions.
"""

from __future__ import annotations

import torch
from torch import Tensor

from captioning.decoding import SearchOutput, beam_search
from captioning.models.decoders.base import Decoder, DecoderOutput, State
from captioning.models.decoders.lstm import LSTMDecoder


class ReferenceSoftLSTM(Decoder):
    def __init__(self, decoder: LSTMDecoder):
        super().__init__()
        self.d = decoder  # shares every parameter: same math, different schedule of work
        self.vocab_size, self.feature_dim = decoder.vocab_size, decoder.feature_dim

    def init_state(self, features: Tensor, mask: Tensor | None = None) -> State:
        features = self.d.with_positions(features)  # (B, L, D')
        mean = features.mean(1)  # (B, D)
        return {
            "h": torch.tanh(self.d.init_h(mean)),
            "c": torch.tanh(self.d.init_c(mean)),
            "features": features,
        }

    def step(self, tokens: Tensor, state: State) -> tuple[Tensor, Tensor, State]:
        logits, alpha, h, c = self._cell(tokens, state["features"], state["h"], state["c"])
        return logits, alpha, {**state, "h": h, "c": c}

    def _cell(self, tokens: Tensor, features: Tensor, h: Tensor, c: Tensor):
        d, att = self.d, self.d.attention
        emb = d.embedding(tokens)  # (B, E)
        keys = att.key_proj(features)  # (B, L, A) recomputed every step
        e = att.score(torch.tanh(keys + att.query_proj(h).unsqueeze(1))).squeeze(-1)  # (B, L)
        alpha = torch.softmax(e, -1)
        z = (alpha.unsqueeze(-1) * features).sum(1)  # (B, D)
        if d.gate is not None:
            z = torch.sigmoid(d.gate(h)) * z
        gates = d.gates_emb(emb) + d.gates_rec(torch.cat([z, h], -1))  # (B, 4H)
        i, f, g, o = gates.chunk(4, -1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        logits = d.out(d.dropout(torch.tanh(emb + d.out_h(h) + d.out_z(z))))  # (B, V) one step at a time
        return logits, alpha, h, c

    def forward(self, features: Tensor, tokens: Tensor, mask: Tensor | None = None) -> DecoderOutput:
        state = self.init_state(features)
        features, h, c = state["features"], state["h"], state["c"]
        logits, alphas = [], []
        for t in range(tokens.shape[1]):
            out, alpha, h, c = self._cell(tokens[:, t], features, h, c)
            logits.append(out)
            alphas.append(alpha)
        a = torch.stack(alphas, 1)
        return DecoderOutput(logits=torch.stack(logits, 1), attention=a, alphas=a)


@torch.no_grad()
def per_image_beam_search(
    decoder: Decoder, features: Tensor, num_beams: int, max_new_tokens: int, end_id: int = 2
) -> list[SearchOutput]:
    """Beam search one image at a time (batch 1, K rows per call)."""
    return [
        beam_search(decoder, features[i : i + 1], num_beams, max_new_tokens, end_id=end_id)
        for i in range(features.shape[0])
    ]
