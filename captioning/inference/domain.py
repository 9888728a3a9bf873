"""Does a photo look like the training photos? The encoder's own ImageNet classifier (EfficientNet-Lite1
with its packaged head) answers, so that a caption of a cat by a model that saw dogs comes with a word.

``captioning/inference/domains/<data>.json`` (written by ``scripts/imagenet_domain.py`` from the training
photos, never by hand) holds how often the classifier sees each of its 1,000 classes in those photos: the
mean class probability ``q(c)`` over them. A photo's *surprise* is the expected surprisal of its classes
under that frequency, ``-sum_c p(c | photo) log q(c)`` (nats): low for the bikes, beaches, swings and dog
breeds the training photos are full of, high for a confident espresso or cheetah, which they almost never
show. Above the file's threshold (a high quantile of the training photos' own surprise, so that only a few
of them, and of the dev photos, get it: docs/results/domain_notice.json) the caption comes with a
:class:`DomainNotice` naming the classes the photo looks like:

    looks like: Egyptian cat (0.78), tabby; Flickr8k models know people, dogs and outdoor scenes

The classifier runs at its own resolution (240 px for Lite1) on the resized (not cropped) image the
captioner reads. A model whose training data has no domain file (your own data) gets no notice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

DOMAINS = Path(__file__).with_name("domains")
LOOKS_LIKE = 2  # classes named in a notice


@dataclass(frozen=True)
class DomainNotice:
    """Why a photo looks unlike the training photos: its top classes with their probabilities, and its
    surprise (nats) above the ``threshold``."""

    looks_like: tuple[tuple[str, float], ...]
    surprise: float
    threshold: float
    knows: str  # what the training photos show, in words: "Flickr8k models know people, dogs and ..."

    def __str__(self) -> str:
        named = ", ".join(
            f"{name} ({p:.2f})" if i == 0 else name for i, (name, p) in enumerate(self.looks_like)
        )
        return f"looks like: {named}; {self.knows}"

    def to_json(self) -> dict:
        return {
            "message": str(self),
            "looks_like": [{"class": name, "probability": round(p, 4)} for name, p in self.looks_like],
            "surprise": round(self.surprise, 4),
            "threshold": round(self.threshold, 4),
        }


@dataclass(frozen=True)
class Domain:
    """One data set's domain file: the classifier, its class names, how often the training photos show
    each class, and the surprise threshold."""

    data: str
    variant: str  # the EfficientNet-Lite whose packaged classifier is used
    image_size: int
    classes: tuple[str, ...]  # the 1,000 ImageNet class names, in the classifier's output order
    frequency: tuple[float, ...]  # q(c): the mean class probability over the training photos
    threshold: float
    knows: str

    @classmethod
    def load(cls, path: str | Path) -> Domain:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        return cls(
            data=raw["data"], variant=raw["classifier"]["variant"], image_size=raw["classifier"]["image_size"],
            classes=tuple(raw["classes"]), frequency=tuple(raw["rule"]["frequency"]),
            threshold=float(raw["rule"]["threshold"]), knows=raw["knows"],
        )  # fmt: skip


def domain_for(data: str | None) -> Domain | None:
    """The shipped domain of data set ``data`` (``captioning/inference/domains/<data>.json``), or None."""
    if not data or not data.replace("_", "").isalnum():
        return None
    path = DOMAINS / f"{data}.json"
    return Domain.load(path) if path.is_file() else None


@cache
def _classifier(variant: str) -> torch.nn.Module:
    from captioning.models.efficientnet_lite import imagenet_classifier

    return imagenet_classifier(variant)


def surprise(probs: Tensor, frequency: Tensor) -> Tensor:
    """(B, C) class probabilities, (C,) training frequencies -> (B,) expected surprisal in nats."""
    return -(probs * frequency.clamp_min(1e-12).log()).sum(-1)


class DomainCheck:
    """``notices(batch)``: a :class:`DomainNotice` or None per image of a (B, 3, S, S) batch in [0, 1]."""

    def __init__(self, domain: Domain, device: str | torch.device = "cpu"):
        self.domain = domain
        self.net = _classifier(domain.variant)
        self.device = torch.device(device)
        self.frequency = torch.tensor(domain.frequency, dtype=torch.float32)

    @torch.no_grad()
    def probabilities(self, batch: Tensor) -> Tensor:
        """(B, 3, S, S) in [0, 1] -> (B, 1000) class probabilities, on the CPU, float32."""
        size = self.domain.image_size
        x = batch.float()
        if x.shape[-2:] != (size, size):  # the captioner's input size: brought to the classifier's
            x = F.interpolate(x, size=(size, size), mode="bicubic", antialias=True, align_corners=False)
        x = (x.clamp(0, 1) - 0.5) / 0.5  # Lite's input scaling (captioning/models/efficientnet_lite.py)
        net = self.net.to(self.device)
        return net(x.to(self.device)).float().softmax(-1).cpu()

    def notices(self, batch: Tensor) -> list[DomainNotice | None]:
        probs = self.probabilities(batch)
        scores = surprise(probs, self.frequency)
        out: list[DomainNotice | None] = []
        for p, score in zip(probs, scores.tolist()):
            if score <= self.domain.threshold:
                out.append(None)
                continue
            top = p.topk(LOOKS_LIKE)
            named = tuple(
                (self.domain.classes[i], v) for i, v in zip(top.indices.tolist(), top.values.tolist())
            )
            out.append(DomainNotice(named, score, self.domain.threshold, self.domain.knows))
        return out
