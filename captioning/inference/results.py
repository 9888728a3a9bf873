"""What the Python API returns: one image's :class:`CaptionResult`, one batch's :class:`CaptionedBatch`
(``Captioner.iter_batches``), and the :class:`ImageInputError` naming the inputs that could not be read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from torch import Tensor

from captioning.decoding.captions import BrokenOutput
from captioning.inference.domain import DomainNotice
from captioning.inference.image_inputs import ImageInput, as_pil


@dataclass
class CaptionResult:
    """One image's caption. ``attention`` is (T, H, W): row t is the map that produced word t."""

    caption: str
    tokens: list[str]
    attention: np.ndarray  # (T, H, W) float32
    token_log_probs: list[float]  # one per generated token, <end> included when emitted
    score: float  # log_prob / length ** length_penalty, the ranking score
    log_prob: float
    image: str = ""  # the path, or "<input i>" for in-memory images
    attention_label: str = ""  # what the attention map is (the decoder's attention_map_label), for overlays
    candidates: list[CaptionResult] = field(default_factory=list, repr=False)  # the n-best list, best first
    domain_notice: DomainNotice | None = None  # unlike the training photos (inference/domain.py)

    def to_json(self) -> dict[str, Any]:
        t, h, w = self.attention.shape
        out = {
            "image": self.image,
            "caption": self.caption,
            "tokens": self.tokens,
            "grid": [h, w],
            "attention": self.attention.reshape(t, h * w).tolist(),  # rows align with tokens
            "token_log_probs": self.token_log_probs,
            "score": self.score,
        }
        if len(self.candidates) > 1:
            out["candidates"] = [{"caption": c.caption, "score": c.score} for c in self.candidates]
        if self.domain_notice is not None:  # as candidates: only when there is one
            out["domain_notice"] = self.domain_notice.to_json()
        return out

    def overlay(self, image: ImageInput, path: str | Path | None = None, **options) -> Image.Image:
        """The attention overlay (``captioning.inference.viz.render_overlay``: one colour scale for the
        caption, ``scale="word"`` for per-word scaling), labelled with what the map is (the decoder's
        ``attention_map_label``); also saved when ``path`` is given (its suffix names the format), through
        captioning/writes.py: never over the captioned image, a model file or a device, whole or not at all."""
        from captioning.inference.viz import render_overlay
        from captioning.writes import output

        t, h, w = self.attention.shape
        options.setdefault("subtitle", self.attention_label or None)
        picture = render_overlay(
            as_pil(image), self.tokens, self.attention.reshape(t, h * w), (h, w),
            caption=self.caption, score=self.score, **options,
        )  # fmt: skip
        if path is not None:
            if not isinstance(path, str | Path) or not str(path).strip():
                raise TypeError(f"overlay: path={path!r}; expected the path of the image file to write")
            path = Path(path)
            image_format = Image.registered_extensions().get(path.suffix.lower())
            if image_format is None:
                raise ValueError(
                    f"{path}: {path.suffix or 'no suffix'} is not an image format; expected e.g. .png or .jpg"
                )
            sources = [p for p in (image, self.image) if isinstance(p, str | Path) and str(p).strip()]
            out = output(path, "the attention overlay", inputs=dict.fromkeys(sources, "the captioned image"))
            with out.replacing() as temp:
                picture.save(temp, format=image_format)
        return picture


ON_ERROR = ("raise", "skip")


class ImageInputError(ValueError):
    """Inputs that could not be captioned; the others were. ``failures``: (index, name, reason) of each
    bad input; ``results``: the good inputs' results in input order (filled by ``Captioner.caption``;
    empty from ``iter_captions``, whose results were already yielded)."""

    def __init__(self, failures: list[tuple[int, str, str]]):
        self.failures, self.results = failures, []
        shown = "; ".join(f"{name}: {reason}" for _, name, reason in failures)
        super().__init__(
            f"{len(failures)} input{'s' if len(failures) > 1 else ''} could not be captioned (the others "
            f"were: see .results): {shown}"
            if len(failures) > 1
            else shown
        )


@dataclass
class CaptionedBatch:
    """One batch of :meth:`Captioner.iter_batches`: the readable inputs' results in input order, the
    inputs that could not be read, and, when the network captioned nothing (NaN/inf scores, every caption
    empty), ``broken`` instead of results."""

    indices: list[int] = field(default_factory=list)  # the input position of each readable input
    names: list[str] = field(default_factory=list)  # each one's name: its path, or "<input i>"
    results: list[CaptionResult] = field(default_factory=list)  # one per index; empty when broken
    failures: list[tuple[int, str, str]] = field(default_factory=list)  # (index, name, reason) unreadable
    broken: BrokenOutput | None = None
    note: str | None = None  # a synthetic-scene model's note on a photo: on the first batch that needs it
    pictures: list[Image.Image] = field(default_factory=list, repr=False)  # with overlay_side: one per index
    tensors: list[Tensor] = field(default_factory=list, repr=False)  # the model inputs, until decoded


HIDDEN_WORDS = frozenset({"<unk>"})  # kept in tokens, not shown in the caption


def display_caption(words: Sequence[str]) -> str:
    """The caption shown to people: the words joined, ``<unk>`` left out (it is in the tokens)."""
    return " ".join(w for w in words if w not in HIDDEN_WORDS)
