"""An ensemble of trained decoders over one encoder grid, decoded as one model.

Each step every member advances on its own state and the ensemble's next-word distribution is the mean
of the members' distributions,

    p(y_t | y_<t, a) = 1/M Σ_m p_m(y_t | y_<t, a),

the usual ensemble of caption models (e.g. Vinyals et al. 2015, Rennie et al. 2017): the members' errors
differ, so the words they agree on win. Returned as log-probabilities (``logits``: log p, so a softmax of
them gives p back and every search and logits processor works unchanged). The attention map returned per
step is the members' mean, so overlays and grounding see where the ensemble as a whole looked.

The members must share the vocabulary and read the same grid (B, L, D): one encoder feeds them all (see
``captioning.checkpoints.ensemble``, which checks both when it assembles checkpoints). Members that trained
their own encoders read one concatenated grid, each its own slice (``FeatureSlice``, and
``captioning.models.encoders.ensemble.EnsembleEncoder``). Their states live
side by side in one dict under the prefix ``"{m}."``; beam search's ``expand_state`` and
``reorder_state`` hand each member its own part, so each keeps its image-only (static) tensors at B rows
as when it decodes alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from captioning.models.decoders.base import Decoder, DecoderOutput, State


class EnsembleDecoder(Decoder):
    def __init__(self, members: Sequence[Decoder]):
        super().__init__()
        if len(members) < 2:
            raise ValueError(f"an ensemble needs at least 2 decoders, got {len(members)}")
        sizes = {(m.vocab_size, m.feature_dim) for m in members}
        if len(sizes) != 1:
            raise ValueError(
                "ensemble members must share the vocabulary size and the feature dim; got (vocab, D) = "
                + ", ".join(f"{m.vocab_size, m.feature_dim}" for m in members)
            )
        self.members = nn.ModuleList(members)
        self.vocab_size, self.feature_dim = sizes.pop()
        self.static_keys = tuple(f"{i}.{k}" for i, m in enumerate(members) for k in m.static_keys)
        labels = list(dict.fromkeys(m.attention_map_label for m in members))
        self.attention_map_label = f"mean over {len(members)} models of: {'; '.join(labels)}"

    def _split(self, state: State) -> list[State]:
        parts: list[State] = [{} for _ in self.members]
        for name, t in state.items():
            i, key = name.split(".", 1)
            parts[int(i)][key] = t
        return parts

    @staticmethod
    def _join(parts: Sequence[State]) -> State:
        return {f"{i}.{k}": t for i, part in enumerate(parts) for k, t in part.items()}

    def expand_state(self, state: State, k: int) -> State:
        # Each member expands its own state (its static keys stay at B rows), as if decoded alone.
        return self._join([m.expand_state(p, k) for m, p in zip(self.members, self._split(state))])

    def reorder_state(self, state: State, index: Tensor) -> State:
        return self._join([m.reorder_state(p, index) for m, p in zip(self.members, self._split(state))])

    def _mean_probs(self, logits: Sequence[Tensor]) -> Tensor:
        # log (1/M Σ_m p_m) computed in log space: logsumexp over members of log p_m, minus log M.
        logp = torch.stack([lg.float().log_softmax(dim=-1) for lg in logits])  # (M, ..., V)
        return torch.logsumexp(logp, dim=0) - math.log(len(logits))  # (..., V)

    def init_state(self, features: Tensor, mask: Tensor | None = None) -> State:
        return self._join([m.init_state(features, mask) for m in self.members])

    def step(self, tokens: Tensor, state: State) -> tuple[Tensor, Tensor, State]:
        logits, attention, parts = [], [], []
        for member, part in zip(self.members, self._split(state)):
            lg, att, part = member.step(tokens, part)  # (B·R, V), (B·R, L)
            logits.append(lg)
            attention.append(att.float())
            parts.append(part)
        return (
            self._mean_probs(logits),
            torch.stack(attention).mean(0),
            self._join(parts),
        )  # (B·R, V), (B·R, L)

    def forward(self, features: Tensor, tokens: Tensor, mask: Tensor | None = None) -> DecoderOutput:
        outs = [m(features, tokens, mask) for m in self.members]
        return DecoderOutput(
            logits=self._mean_probs([o.logits for o in outs]),  # (B, T, V) log of the mean p
            attention=torch.stack([o.attention.float() for o in outs]).mean(0),  # (B, T, L)
            alphas=torch.stack([o.alphas.float() for o in outs]).mean(0),  # (B, T, L)
        )


class FeatureSlice(Decoder):
    """A trained decoder reading its own encoder's part ``[start, stop)`` of a wider grid's feature axis:
    a member of an ensemble whose encoders differ (``EnsembleEncoder`` concatenates their grids). It
    decodes exactly as the decoder would over that encoder's grid alone, so an ensemble's members can
    still be decoded one by one over the shared grid (consensus reranking's candidates)."""

    def __init__(self, decoder: Decoder, start: int, stop: int, feature_dim: int):
        super().__init__()
        if not 0 <= start < stop <= feature_dim or stop - start != decoder.feature_dim:
            raise ValueError(
                f"FeatureSlice [{start}, {stop}) of a {feature_dim}-dim grid does not fit a decoder that "
                f"reads {decoder.feature_dim}-dim features"
            )
        self.decoder, self.start, self.stop = decoder, start, stop
        self.vocab_size, self.feature_dim = decoder.vocab_size, feature_dim
        self.static_keys = decoder.static_keys
        self.attention_map_label = decoder.attention_map_label

    def _own(self, features: Tensor) -> Tensor:
        return features[..., self.start : self.stop]  # (B, L, D) -> (B, L, stop - start)

    def init_state(self, features: Tensor, mask: Tensor | None = None) -> State:
        return self.decoder.init_state(self._own(features), mask)

    def step(self, tokens: Tensor, state: State) -> tuple[Tensor, Tensor, State]:
        return self.decoder.step(tokens, state)

    def expand_state(self, state: State, k: int) -> State:
        return self.decoder.expand_state(state, k)

    def reorder_state(self, state: State, index: Tensor) -> State:
        return self.decoder.reorder_state(state, index)

    def forward(self, features: Tensor, tokens: Tensor, mask: Tensor | None = None) -> DecoderOutput:
        return self.decoder(self._own(features), tokens, mask)
