"""Consensus reranking: of a captioner's candidate captions, keep the one the evidence agrees with most.

Beam search returns the caption the model finds most probable; CIDEr-D rewards the caption most like
what people said. Two estimates of the latter, each a mean CIDEr-D with document frequencies of the
training references (``captioning.metrics.cider``):

* **minimum Bayes risk** (Kumar & Byrne 2004): the model's own candidates (n-best beams and samples,
  with their repeats) are draws from its distribution, so the mean CIDEr-D of caption c against them
  estimates E_{w ~ p(w | I)}[CIDEr-D(c; w)], the expected score if the references were the model's;
* **nearest-neighbour consensus** (Devlin et al. 2015, "Exploring nearest neighbor approaches for image
  captioning"): the reference captions of the k training images nearest to this one
  (``caption_bank.py``), evidence from outside the model.

    score(c) = mean_{e ∈ candidates} CIDEr-D(c; e) + weight · mean_{r ∈ neighbours' captions} CIDEr-D(c; r)

The candidates of an ensemble are pooled from each member decoded alone (the members disagree more
than their mean distribution does, and the consensus is over their union). The defaults were chosen on
one half of the Flickr8k dev images and checked on the other (docs/experiments/flickr8k.md).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from captioning.data.vocab import Vocab
from captioning.decoding import GenerationConfig, generate
from captioning.decoding.captions import Caption, to_captions
from captioning.inference.caption_bank import CaptionBank
from captioning.metrics.cider import CiderD, Weighted
from captioning.models.decoders.base import Decoder
from captioning.models.decoders.ensemble import EnsembleDecoder


@dataclass(frozen=True)
class RerankConfig:
    num_beams: int = 5  # the n best beams of each decoder, with the decoding options given
    num_samples: int = 10  # plus this many samples of each decoder (nucleus, top_p)
    top_p: float = 0.9
    neighbours: int = 30  # nearest training images whose captions vote (0: minimum Bayes risk alone)
    weight: float = 16.0  # of the neighbours' vote against the candidates' own
    seed: int = 0  # of the sampler: the same seed, the same captions

    def __post_init__(self) -> None:
        def integer(v, low, high):
            return isinstance(v, int) and not isinstance(v, bool) and low <= v <= high

        def number(v, ok):  # finite: an inf weight makes every score inf or NaN, a NaN one every vote a tie
            return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and ok(v)

        for name, ok, expected in (
            ("num_beams", integer(self.num_beams, 1, 64), "an integer in [1, 64]"),
            ("num_samples", integer(self.num_samples, 0, 256), "an integer in [0, 256]"),
            ("top_p", number(self.top_p, lambda v: 0 < v <= 1), "a number in (0, 1]"),
            ("neighbours", integer(self.neighbours, 0, 100_000), "an integer in [0, 100000]"),
            ("weight", number(self.weight, lambda v: 0 <= v <= 1e6), "a finite number in [0, 1e6]"),
            ("seed", integer(self.seed, 0, 2**63 - 1), "an integer in [0, 2**63)"),
        ):
            if not ok:
                raise ValueError(f"rerank.{name}={getattr(self, name)!r}: expected {expected}")

    def check_decoding(self, options: Mapping[str, Any], where: str = "") -> None:
        """Refuse decoding options the reranking would not honour, each by name: it searches its own
        ``num_beams`` beams (a different explicit ``num_beams`` is refused: set rerank.num_beams) and
        draws its own ``num_samples`` samples (``do_sample`` is refused), and returns one caption per image
        with every distinct candidate (``num_return_sequences`` is refused). ``None`` values are unset."""
        prefix = f"{where}: " if where else ""
        beams = options.get("num_beams")
        if beams is not None and beams != self.num_beams:
            raise ValueError(
                f"{prefix}num_beams={beams!r} with reranking: the reranker searches rerank.num_beams="
                f"{self.num_beams} beams; set rerank.num_beams={beams!r} instead"
            )
        if options.get("do_sample"):
            raise ValueError(
                f"{prefix}do_sample with reranking: the reranker draws its own rerank.num_samples="
                f"{self.num_samples} samples (top_p={self.top_p}) beside its beams; drop do_sample"
            )
        n = options.get("num_return_sequences")
        if n is not None and n != 1:
            raise ValueError(
                f"{prefix}num_return_sequences={n!r} with reranking: it keeps one caption per image (its "
                "other distinct candidates are listed with it); drop num_return_sequences"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def consensus_scores(candidates: Sequence[str], evidence: Sequence[str], cider: CiderD) -> np.ndarray:
    """(H,) the mean CIDEr-D of each candidate against the ``evidence`` captions, one by one."""
    return _mean_similarity([cider.vector(c) for c in candidates], [cider.vector(e) for e in evidence], cider)


def _mean_similarity(hyps: Sequence[Weighted], refs: Sequence[Weighted], cider: CiderD) -> np.ndarray:
    if not refs:
        return np.zeros(len(hyps))
    return np.array([np.mean([cider.similarity(h, r) for r in refs]) for h in hyps], dtype=np.float64)


MIN_BANK_IMAGES = 2


class ConsensusReranker:
    """Candidates from decoders, scored by ``consensus_scores`` against themselves and the bank."""

    def __init__(self, config: RerankConfig, bank: CaptionBank):
        if not isinstance(config, RerankConfig):
            raise TypeError(
                f"ConsensusReranker: config is a {type(config).__name__}; expected a RerankConfig"
            )
        config.__post_init__()  # again: a config changed after it was made (object.__setattr__) is refused
        if len(bank) < MIN_BANK_IMAGES:  # CIDEr-D's idf, log(N / df), is 0 for every n-gram of one image
            raise ValueError(
                f"the caption bank has {len(bank)} image; consensus reranking needs at least "
                f"{MIN_BANK_IMAGES} (its CIDEr-D weights come from the bank's document frequencies, all 0 for "
                "one image, so every vote would tie): build it from the training split (`captioning bank`)"
            )
        self.config, self.bank = config, bank
        self.cider = CiderD(bank.captions)  # document frequencies of the bank's (training) references
        # the sampler's generator per device: sampling on a GPU needs one of its own there
        self._generators: dict[torch.device, torch.Generator] = {}
        self._voices: dict[int, list[Weighted]] = {}  # bank image -> its captions' vectors, once each

    def generator(self, device: torch.device) -> torch.Generator:
        """The sampler's generator on ``device``, seeded with ``config.seed`` when first used there (one
        stream per device, as torch's samplers need the generator on the tensors' device)."""
        if device not in self._generators:
            self._generators[device] = torch.Generator(device=device).manual_seed(self.config.seed)
        return self._generators[device]

    def _voices_of(self, rows: Sequence[int]) -> list[Weighted]:
        for j in rows:
            if j not in self._voices:
                self._voices[j] = [self.cider.vector(c) for c in self.bank.captions[j]]
        return [v for j in rows for v in self._voices[j]]

    def candidates(
        self, decoder: Decoder, features: Tensor, vocab: Vocab, decoding: GenerationConfig
    ) -> list[list[Caption]]:
        """Per image of ``features`` (B, L, D): each decoder's n best beams, then its samples."""
        cfg = self.config
        members = list(decoder.members) if isinstance(decoder, EnsembleDecoder) else [decoder]
        per_image: list[list[Caption]] = [[] for _ in range(features.shape[0])]
        for member in members:
            runs = [(decoding.replace(num_beams=cfg.num_beams, num_return_sequences=cfg.num_beams), None)]
            if cfg.num_samples:
                sampling = decoding.replace(
                    num_beams=1, do_sample=True, num_return_sequences=cfg.num_samples, top_p=cfg.top_p
                )
                runs.append((sampling, self.generator(features.device)))
            for options, generator in runs:
                out = generate(member, features, options, generator=generator)
                captions, n = to_captions(out, vocab), out.num_return_sequences
                for b in range(features.shape[0]):
                    per_image[b].extend(captions[b * n : (b + 1) * n])  # an image's rows are adjacent
        return per_image

    def votes(
        self,
        candidates: Sequence[Sequence[Caption]],
        features: Tensor,
        image_ids: Sequence[Hashable] | None = None,
    ) -> list[tuple[list[str], np.ndarray, np.ndarray]]:
        """Per image: its distinct candidate captions (first occurrence order), their mean CIDEr-D against
        all the candidates (repeats vote too) and against the nearest training images' captions."""
        k = self.config.neighbours
        nearest = self.bank.nearest(features, k, exclude=image_ids) if k else [[] for _ in candidates]
        out = []
        for options, rows in zip(candidates, nearest):
            texts = [" ".join(c.words) for c in options]
            unique = list(dict.fromkeys(texts))  # each distinct caption scored once
            vectors = {t: self.cider.vector(t) for t in unique}
            hyps = [vectors[t] for t in unique]
            own = _mean_similarity(hyps, [vectors[t] for t in texts], self.cider)
            out.append((unique, own, _mean_similarity(hyps, self._voices_of(rows), self.cider)))
        return out

    def choose(
        self,
        candidates: Sequence[Sequence[Caption]],
        features: Tensor,
        image_ids: Sequence[Hashable] | None = None,
    ) -> list[Caption]:
        """The best-scored candidate of each image (ties: the earlier, i.e. the model's own order)."""
        chosen = []
        for options, (unique, own, neighbours) in zip(
            candidates, self.votes(candidates, features, image_ids)
        ):
            score = own + self.config.weight * neighbours
            if any(unique):  # an empty caption (<end> first) is no caption: it wins only when all are empty
                score = np.where([bool(t) for t in unique], score, -np.inf)
            best = unique[int(np.argmax(score))]
            chosen.append(next(c for c in options if " ".join(c.words) == best))
        return chosen
