"""Straightforward reference implementations, for the benchmark's speed-up ratios and equality tests.

``ReferenceSoftLSTM`` computes exactly the same function as ``LSTMDecoder`` with ``AdditiveAttention``
(it reads the same parameters), written the way popular implementations write it: the attention keys
W_k·a_i are recomputed at every time step, and the embedding gates and the output layer run one step
at a time. ``per_image_beam_search`` runs our beam search one image at a time.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from captioning.decoding import Generated, beam_search
from captioning.models.decoders.base import DecoderOutput
from captioning.models.decoders.lstm import LSTMDecoder


class ReferenceSoftLSTM(nn.Module):
    def __init__(self, decoder: LSTMDecoder):
        super().__init__()
        self.d = decoder  # shares every parameter: same math, different schedule of work

    def forward(self, features: Tensor, tokens: Tensor) -> DecoderOutput:
        d, att = self.d, self.d.attention
        mean = features.mean(1)  # (B, D)
        h, c = torch.tanh(d.init_h(mean)), torch.tanh(d.init_c(mean))
        logits, alphas = [], []
        for t in range(tokens.shape[1]):
            emb = d.embedding(tokens[:, t])  # (B, E)
            keys = att.key_proj(features)  # (B, L, A) recomputed every step
            e = att.score(torch.tanh(keys + att.query_proj(h).unsqueeze(1))).squeeze(-1)  # (B, L)
            alpha = torch.softmax(e, -1)
            z = (alpha.unsqueeze(-1) * features).sum(1)  # (B, D)
            if d.gate is not None:
                z = torch.sigmoid(d.gate(h)) * z
            gates = d.gates_emb(emb) + d.gates_ctx(z) + d.gates_hid(h)  # (B, 4H)
            i, f, g, o = gates.chunk(4, -1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            out = d.out(d.dropout(torch.tanh(emb + d.out_h(h) + d.out_z(z))))  # (B, V) one step at a time
            logits.append(out)
            alphas.append(alpha)
        a = torch.stack(alphas, 1)
        return DecoderOutput(logits=torch.stack(logits, 1), attention=a, alphas=a)


@torch.no_grad()
def per_image_beam_search(decoder, features: Tensor, beam_size: int, max_length: int) -> list[Generated]:
    return [
        beam_search(decoder, features[i : i + 1], beam_size, max_length) for i in range(features.shape[0])
    ]
