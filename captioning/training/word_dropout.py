"""Word dropout: teacher forcing with some of the previous words hidden (Bowman et al. 2016, §3.3).

With cross-entropy the decoder reads the reference's words w_1..w_{t-1} to predict w_t (Xu et al. eqs. 1, 7:
E y_{t-1}), so on a small training set it can learn to continue its training captions from their words
instead of from the image. Replacing each previous word by ``<unk>`` with probability p makes the image
(the context vector ẑ_t) carry more of the prediction; the targets are unchanged, and decoding at
inference, which feeds the model's own words, is untouched.
"""

from __future__ import annotations

import torch
from torch import Tensor


def drop_words(inputs: Tensor, p: float, unk_id: int, keep: tuple[int, ...]) -> Tensor:
    """``inputs`` (B, T) token ids with each id not in ``keep`` (``<pad>``, ``<start>``) replaced by
    ``unk_id`` with probability ``p``, independently, from torch's global generator (a resumed run draws
    the same masks: callbacks/exact_resume.py restores it)."""
    if p == 0.0:
        return inputs
    hidden = torch.rand(inputs.shape, device=inputs.device) < p  # (B, T)
    for token in keep:
        hidden &= inputs != token
    return inputs.masked_fill(hidden, unk_id)
