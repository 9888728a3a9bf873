"""Generated ids -> words with their attention: the one path of validation, ``caption``, ``evaluate``,
the W&B table and the Python API."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from captioning.data.vocab import Vocab
from captioning.decoding.config import GenerationConfig
from captioning.decoding.search import SearchOutput, generate


@dataclass
class Caption:
    """One caption as words, with the attention behind each word."""

    words: list[str]  # without <start>/<end>
    attention: Tensor  # (len(words), L) float32 on the CPU: row t produced word t
    token_log_probs: list[float]  # one per generated token, <end> included when it was emitted
    score: float  # the ranking score (log_prob / length**length_penalty)
    log_prob: float  # Σ token_log_probs


NON_FINITE = "the network's scores are not finite (NaN/inf): the checkpoint's weights are broken"
ALL_EMPTY = (
    "every caption of the batch is empty (the network ends each one before its first word): its weights are "
    "broken or untrained"
)
SHORT_BEAM = (
    ", or this beam search prefers the empty caption (length_penalty={lp} ranks by {what}; try length_penalty=1 "
    "or num_beams=1, the flags --length-penalty / --num-beams)"
)


class BrokenOutput(ValueError):
    """Decoded captions that are no captions: the network, not the images, is at fault. ``reason`` is the
    message without the image's name (it names the checkpoint when known)."""

    def __init__(self, name: str, reason: str, checkpoint: object = None):
        self.reason = f"{reason} ({checkpoint})" if checkpoint else reason
        super().__init__(f"{name}: {self.reason}")


class NonFiniteScores(BrokenOutput):
    """Decoded captions whose scores are NaN/inf: broken weights, not captions (``check_finite``)."""

    def __init__(self, name: str, checkpoint: object = None):
        super().__init__(name, NON_FINITE, checkpoint)


class EmptyCaptions(BrokenOutput):
    """A batch in which every caption is empty: weights (e.g. huge finite ones) that emit <end> at once, or an
    undertrained network whose beam ranks ``<end>`` first when the length penalty does not favour length."""

    def __init__(self, name: str, checkpoint: object = None, config: GenerationConfig | None = None):
        reason = ALL_EMPTY
        # a beam whose length penalty is below 1 favours short captions: the empty one may win honestly
        if config is not None and config.num_beams > 1 and config.length_penalty < 1:
            what = "total log-probability" if config.length_penalty == 0 else "a length-discounted score"
            reason += SHORT_BEAM.format(lp=config.length_penalty, what=what)
        super().__init__(name, reason, checkpoint)


def check_finite(decoded: list[Caption], name: str, checkpoint: object = None) -> None:
    """Raise :class:`NonFiniteScores` naming ``name`` (and ``checkpoint``) when a caption of ``decoded``
    scored NaN/inf.

    Finite weights can still overflow (a layer scaled by 1e18): such "captions" are whatever argmax of
    NaN gives, and scoring or printing them would call a broken model good."""
    if not all(math.isfinite(c.score) and math.isfinite(c.log_prob) for c in decoded):
        raise NonFiniteScores(name, checkpoint)


def check_not_all_empty(
    decoded: list[Caption], name: str, checkpoint: object = None, config: GenerationConfig | None = None
) -> None:
    """Raise :class:`EmptyCaptions` when every caption of a batch ``decoded`` is empty: one image may
    rightly get no words, a whole batch of them is a broken network captioning nothing."""
    if decoded and not any(c.words for c in decoded):
        raise EmptyCaptions(name, checkpoint, config)


@torch.no_grad()
def decode_captions(
    net,
    vocab: Vocab,
    inputs: Tensor | None = None,
    config: GenerationConfig | None = None,
    generator=None,
    *,
    features: Tensor | None = None,
    **options,
) -> list[Caption]:
    """Encode ``inputs`` (B, 3, S, S) images, or the ``features`` a feature cache stored for its encoder
    (``CaptionModel.encode_features``), with ``net`` (a CaptionModel), ``generate``, and turn every row
    into words. Returns B·N captions (N = num_return_sequences, an image's adjacent, best first)."""
    if (inputs is None) == (features is None):
        raise ValueError("decode_captions: pass images (inputs) or features, exactly one")
    grid = net.encode(inputs) if features is None else net.encode_features(features)
    return to_captions(generate(net.decoder, grid, config, generator=generator, **options), vocab)


def to_captions(out: SearchOutput, vocab: Vocab) -> list[Caption]:
    """Every row of ``generate``'s output as words with their attention, in the same order."""
    decoded = []
    for row in range(out.tokens.shape[0]):
        words = vocab.decode(out.tokens[row].tolist())
        n_tokens = int(out.lengths[row])
        decoded.append(
            Caption(
                words=words,
                attention=out.attention[row, : len(words)].float().cpu(),  # (T, L)
                token_log_probs=out.token_log_probs[row, :n_tokens].tolist(),
                score=float(out.score[row]),
                log_prob=float(out.log_prob[row]),
            )
        )
    return decoded
