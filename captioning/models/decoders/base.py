"""The interface every caption decoder implements, so training, greedy and beam search are shared.

A decoder consumes the encoder grid ``features`` (B, L, D) and emits one token distribution per step:

* ``init_state(features, mask)`` builds the per-image state once (e.g. attention keys, KV caches);
* ``step(tokens, state)`` advances one token for every row and returns ``(logits, attention, state)``;
* ``forward(features, tokens)`` is teacher forcing over a whole caption, returning ``DecoderOutput``.

State is a ``dict[str, Tensor]`` whose tensors are all batch-first. Keys listed in ``static_keys``
depend only on the image (features, attention keys, cross-attention K/V): beam search keeps them at B
rows while the recurrent tensors have B·K rows (an image's K beams adjacent), so they are never copied
K times, never reselected, and each step reads them once per image.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

State = dict[str, Tensor]


@dataclass
class DecoderOutput:
    logits: Tensor  # (B, T, V) unnormalised scores of token t+1 given tokens <= t
    attention: Tensor  # (B, T, L) weights actually applied to the grid (one-hot for hard attention)
    alphas: Tensor  # (B, T, L) attention distribution α_t (equals ``attention`` for soft attention)
    aux: dict[str, Tensor] = field(default_factory=dict)  # decoder-specific terms for its auxiliary loss


class Decoder(nn.Module):
    """Base class: subclasses implement ``init_state``, ``step`` and ``forward``."""

    static_keys: tuple[str, ...] = ()
    vocab_size: int
    feature_dim: int
    alpha_c: float = 0.0  # λ of the doubly stochastic attention regulariser (eq. 14); LSTMs set it
    entropy_c: float = 0.0  # λ_E of the attention-entropy penalty (per target token); LSTMs set it
    # What the attention map returned per token is, as overlays label it (captioning/inference/viz.py).
    attention_map_label: str = "attention alpha_t over the grid (eq. 4-5)"

    def start_training_batch(self) -> None:
        """Called once before each training batch (by the LightningModule): advance per-batch state
        such as a semi-sampling coin or an annealed temperature. Nothing for deterministic decoders."""

    def init_state(self, features: Tensor, mask: Tensor | None = None) -> State:
        raise NotImplementedError

    def step(self, tokens: Tensor, state: State) -> tuple[Tensor, Tensor, State]:
        raise NotImplementedError

    def forward(self, features: Tensor, tokens: Tensor, mask: Tensor | None = None) -> DecoderOutput:
        raise NotImplementedError

    def auxiliary_loss(
        self, output: DecoderOutput, token_logp: Tensor, token_mask: Tensor, targets: Tensor | None = None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Extra training terms (REINFORCE surrogate, entropy bonus). Zero for deterministic decoders.

        ``token_logp`` (B, T): log p(y_t | ...) of the target tokens; ``token_mask`` (B, T): 1 on real tokens;
        ``targets`` (B, T) the target tokens (for rewards that rescore them under other choices).
        """
        return token_logp.new_zeros(()), {}

    def compile_step(self) -> None:
        """``torch.compile`` the per-token computation (``model.compile=true``); forward, step and decoding
        keep working unchanged. Subclasses compile the function that both forward and step call."""
        self.step = torch.compile(self.step)

    def expand_state(self, state: State, k: int) -> State:
        """Repeat every recurrent row k times, adjacent: row b becomes rows b*k .. b*k+k-1 (beam search).

        ``static_keys`` (image-only tensors: features, attention keys, cross-attention K/V, masks) keep
        their B rows: ``step`` must accept B·K recurrent rows over B static rows (K per image)."""
        return {
            name: t if name in self.static_keys else t.repeat_interleave(k, dim=0)
            for name, t in state.items()
        }

    def reorder_state(self, state: State, index: Tensor) -> State:
        """Select rows ``index`` of the recurrent state; ``index`` never crosses images."""
        return {
            name: t if name in self.static_keys else t.index_select(0, index) for name, t in state.items()
        }


def shift_inputs(tokens: Tensor) -> tuple[Tensor, Tensor]:
    """Teacher forcing split: ``tokens`` (B, T+1) = <start> w_1 .. w_n <end> <pad>..

    Returns inputs (B, T) = tokens[:, :-1] and targets (B, T) = tokens[:, 1:].
    """
    return tokens[:, :-1], tokens[:, 1:]


def as_state_mask(mask: Tensor | None, features: Tensor) -> Tensor:
    """A (B, L) bool mask of valid grid locations (all valid when ``mask`` is None)."""
    if mask is None:
        return torch.ones(features.shape[:2], dtype=torch.bool, device=features.device)
    if mask.shape != features.shape[:2]:
        raise ValueError(f"attention mask shape {tuple(mask.shape)} != grid {tuple(features.shape[:2])}")
    return mask.bool()
