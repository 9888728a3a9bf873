"""Evaluate a checkpoint on a data split: decode every image, score with the official toolkit, write files.

The one path behind ``captioning evaluate``, ``scripts/compare.py`` and the tests:

    source = build_source(data_cfg, "test")
    evaluation = evaluate_checkpoint(checkpoint, source, decoding={"num_beams": 3})
    write_evaluation(evaluation, out_dir)   # results.json (COCO format) + scores.json
    print(format_evaluation(evaluation))

Scores are pycocoevalcap's (PTB tokenizer by default, as in the official coco-caption demo) on the
toolkit's 0-1 scale; NLTK's corpus BLEU rides along as a cross-check. On synthetic scenes every registered
scene metric (captioning.metrics.scenes: objects named right, attention grounding, scene score) is computed
from the same decoded captions and attention, by the path validation takes.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hydra
import numpy as np
import torch
from omegaconf import DictConfig

from captioning import progress
from captioning.checkpoints.ensemble import load_captioners, members_label
from captioning.checkpoints.load import LoadedCheckpoint
from captioning.data.datamodule import ImageLoader
from captioning.data.features import FeatureCache, encoder_identity
from captioning.data.images import ImageError
from captioning.data.readers import DatasetError
from captioning.data.sources import CaptionSource, MissingSplit, SyntheticSource
from captioning.decoding import GenerationConfig, decode_captions
from captioning.decoding.captions import check_finite, check_not_all_empty
from captioning.decoding.search import hard_attention_layers
from captioning.inference.caption_bank import CaptionBank
from captioning.inference.consensus import ConsensusReranker, RerankConfig
from captioning.metrics.coco import EvalReport, evaluate_results
from captioning.metrics.names import SCENE_METRICS
from captioning.metrics.report import format_report, format_scene_metrics
from captioning.metrics.scenes import score_scenes
from captioning.writes import Output, output

SPLITS = ("train", "val", "test")


def synthetic_words() -> frozenset[str]:
    """Every word a synthetic scene's reference caption can use (``captioning.data.synthetic``)."""
    from captioning.data.synthetic import COLORS, POSITIONS, SHAPES, SIZES, SceneObject, scene_captions

    objects = [SceneObject(s, c, z, p, (0, 0, 0, 0)) for s in SHAPES for c in COLORS for z in SIZES
               for p in POSITIONS]  # fmt: skip
    words = set()
    for pair in ((o,) for o in objects[:: len(POSITIONS)]), zip(objects, objects[1:]):
        for group in pair:
            for caption in scene_captions(tuple(group)):
                words.update(caption.split())
    for o in objects:  # every position word, in both templates
        words.update(o.position.split())
    return frozenset(words)


def trained_data(meta: dict[str, Any], strict: bool = False) -> str | None:
    """The data config (``captioning/conf/data/<name>.yaml``) a checkpoint's plain-data entry says it was
    trained on: its provenance's ``data`` where recorded; else ``"synthetic"`` for a vocabulary of which more
    than half the words are synthetic-scene words (a photo corpus's has thousands of others), with
    ``strict`` only for one of nothing but synthetic-scene words; else None."""
    provenance = meta.get("provenance") if isinstance(meta.get("provenance"), dict) else {}
    recorded = provenance.get("data")
    if isinstance(recorded, dict):  # a recorded config group choice or config with its name
        recorded = recorded.get("name")
    if isinstance(recorded, str) and recorded.strip():
        return recorded.strip()
    vocab = meta.get("vocab")
    itos = vocab.get("itos") if isinstance(vocab, dict) else None
    if not isinstance(itos, list):
        return None
    words = [w for w in itos if isinstance(w, str) and not (w.startswith("<") and w.endswith(">"))]
    known = synthetic_words()
    hits = sum(w in known for w in words)
    if words and (hits == len(words) if strict else hits * 2 > len(words)):
        return "synthetic"
    return None


@dataclass
class SplitCaptions:
    """Generated captions of every image of a source, in source order, with their attention."""

    image_ids: list[Any]
    captions: list[str]
    tokens: list[list[str]]
    attention: list[np.ndarray]  # per image (T, L): the map used for each generated word
    grid: tuple[int, int]
    skipped: list[str] = field(default_factory=list)  # one line per unreadable image, not decoded
    indices: list[int] = field(default_factory=list)  # the source index of each decoded image

    def results(self) -> list[dict]:
        """The COCO results list ``[{"image_id", "caption"}]``."""
        return [{"image_id": i, "caption": c} for i, c in zip(self.image_ids, self.captions)]


@dataclass
class Evaluation:
    checkpoint: str
    data: str  # e.g. "synthetic/test"
    decoding: dict[str, Any]
    report: EvalReport
    decoded: SplitCaptions
    # Synthetic scenes only: every registered scene metric's result by name (captioning.metrics.scenes)
    scenes: dict[str, Any] | None = None
    params: dict[str, int] = field(default_factory=dict)  # {"total", "trainable"} of the network
    rerank: dict[str, Any] | None = None  # the consensus reranking's settings, if captions were reranked
    seed: int = 0  # of the sampler (do_sample): the same seed, the same captions

    @property
    def grounding(self) -> dict[str, Any] | None:
        """captioning.metrics.grounding's result (synthetic scenes only)."""
        return None if self.scenes is None else self.scenes.get("grounding")

    @property
    def objects(self) -> dict[str, Any] | None:
        """captioning.metrics.objects' result (synthetic scenes only)."""
        return None if self.scenes is None else self.scenes.get("objects")

    def to_dict(self) -> dict[str, Any]:
        """The scores JSON: everything but the captions (those are in the results file)."""
        return {
            "checkpoint": self.checkpoint,
            "data": self.data,
            "decoding": self.decoding,
            "seed": self.seed,
            "rerank": self.rerank,
            **self.report.to_dict(),
            **dict.fromkeys(SCENE_METRICS),  # one field per scene metric: null but on synthetic scenes
            **(self.scenes or {}),
            "skipped_images": self.decoded.skipped,
            "params": self.params,
        }


def build_source(data_cfg: DictConfig, split: str) -> CaptionSource:
    """Instantiate only the source of ``split`` from a data config; a split the data set does not have is
    an error saying which exist (never another split under its name)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    node = data_cfg.get(split)
    if node is None:
        have = [s for s in SPLITS if data_cfg.get(s) is not None]
        raise ValueError(f"the data config has no {split!r} split (it has {', '.join(have)})")
    source = hydra.utils.instantiate(node)
    if isinstance(source, MissingSplit):
        raise DatasetError(source.reason)
    return source


@torch.no_grad()
def decode_source(
    model: LoadedCheckpoint,
    source: CaptionSource,
    decoding: dict[str, Any],
    batch_size: int = 50,
    feature_cache: FeatureCache | None = None,
    reranker: ConsensusReranker | None = None,
    generator: torch.Generator | None = None,
) -> SplitCaptions:
    """Caption every image of ``source`` with ``generate(**decoding)``; features come from the cache if given.
    With a ``reranker``, each image's caption is the one it chooses among the decoders' candidates.
    ``generator`` draws the samples of ``do_sample`` (repeatable runs). A batch whose scores are not finite
    or whose captions are all empty is an error naming the checkpoint: a broken network is never scored."""
    inputs = model_inputs(model, source, feature_cache)
    device = next(model.net.parameters()).device
    decoded = SplitCaptions([], [], [], [], (model.net.grid_size, model.net.grid_size))
    desc = "decoding" if reranker is None else "decoding and reranking"
    for start in progress.batches(len(source), batch_size, desc):
        indices, rows = [], []
        for i in range(start, min(start + batch_size, len(source))):
            try:  # one unreadable image is reported and left out, not the end of the split
                rows.append(inputs(i))
                indices.append(i)
            except ImageError as err:
                decoded.skipped.append(str(err))
        if not rows:
            continue
        batch = torch.stack(rows).to(device)  # (B, 3, S, S) images, or (B, L, D) cached features
        cached = {"features": batch} if feature_cache is not None else {"images": batch}
        if reranker is None:
            captions = decode_captions(
                model.net, model.vocab, cached.get("images"), features=cached.get("features"),
                generator=generator, **decoding,
            )  # fmt: skip
        else:
            grids = model.net.encode_batch(cached)  # (B, L, D)
            options = reranker.candidates(
                model.net.decoder, grids, model.vocab, GenerationConfig.from_dict(decoding)
            )
            check_finite(
                [c for image in options for c in image], f"image {source.image_id(indices[0])}", model.path
            )
            captions = reranker.choose(options, grids, [source.image_id(i) for i in indices])
        where = f"image {source.image_id(indices[0])} and its batch"
        check_finite(captions, where, model.path)  # never scored as good
        check_not_all_empty(captions, where, model.path)
        for i, caption in zip(indices, captions):
            decoded.indices.append(i)
            decoded.image_ids.append(source.image_id(i))
            decoded.captions.append(" ".join(caption.words))
            decoded.tokens.append(caption.words)
            decoded.attention.append(caption.attention.numpy())  # (T, L)
    return decoded


def frozen_feature_cache(
    model: LoadedCheckpoint, cache_dir: str | Path | None, device: str = "cpu"
) -> FeatureCache | None:
    """The feature cache in ``cache_dir`` for a frozen encoder; None without a folder or for an encoder
    that trains (its grids change with its weights)."""
    encoder = model.net.encoder
    if cache_dir is None or any(p.requires_grad for p in encoder.parameters()):
        return None
    return FeatureCache(encoder, cache_dir, device=device)


def model_inputs(
    model: LoadedCheckpoint, source: CaptionSource, feature_cache: FeatureCache | None
) -> Callable[[int], torch.Tensor]:
    """Image i of ``source`` as the model reads it: its cached grid (``model.net.encode_features``) with a
    ``feature_cache``, else the image itself (``model.net.encode``)."""
    if feature_cache is not None:
        return feature_cache.features(source, model.image_size)
    return ImageLoader(source, model.image_size)


def build_caption_bank(
    model: LoadedCheckpoint,
    source: CaptionSource,
    feature_cache: FeatureCache | None,
    skipped: list[str] | None = None,
    batch_size: int = 250,
) -> CaptionBank:
    """The caption bank of ``source`` (a training split) seen through ``model``'s encoder, with its identity.

    An unreadable image is left out of the bank (as training and evaluate skip it): one line per image
    is appended to ``skipped`` when given, else one warning names how many and the first."""
    from captioning import progress
    from captioning.data.tokenize import tokenize
    from captioning.inference.caption_bank import pooled

    inputs = model_inputs(model, source, feature_cache)
    lines: list[str] = []
    vectors, kept = [], []
    with torch.no_grad():
        for start in progress.batches(len(source), batch_size, "caption bank"):
            rows = []
            for i in range(start, min(start + batch_size, len(source))):
                try:
                    rows.append(inputs(i))
                    kept.append(i)
                except ImageError as err:
                    lines.append(str(err))
            if rows:
                key = "images" if feature_cache is None else "features"
                vectors.append(pooled(model.net.encode_batch({key: torch.stack(rows)})))  # (b, D)
    if not kept:
        raise ValueError(
            f"the caption bank has no readable image ({len(lines)} of {len(source)} could not be read; "
            f"the first: {lines[0] if lines else 'none'})"
        )
    if skipped is not None:
        skipped.extend(lines)
    elif lines:
        warnings.warn(
            f"caption bank: skipped {len(lines)} unreadable images of {len(source)}; the first: {lines[0]}",
            stacklevel=2,
        )
    captions = [[t for t in (" ".join(tokenize(c)) for c in source.captions(i)) if t] for i in kept]
    return CaptionBank(
        torch.cat(vectors), captions, [source.image_id(i) for i in kept],
        encoder_identity(model.net.encoder, model.image_size),
    )  # fmt: skip


def scene_results(decoded: SplitCaptions, source: CaptionSource) -> dict[str, Any]:
    """Every registered scene metric of the decoded captions against the source's scenes (the path
    validation takes: captioning.metrics.scenes.score_scenes)."""
    scenes = [source.scene(i) for i in decoded.indices]  # boxes are in pixels of each scene's canvas
    sizes, objects = [s["image_size"] for s in scenes], [s["objects"] for s in scenes]
    return score_scenes(decoded.captions, decoded.tokens, decoded.attention, decoded.grid, sizes, objects)


def synthetic_grounding(decoded: SplitCaptions, source: SyntheticSource) -> dict[str, float | int]:
    """Attention grounding of the decoded captions against the scenes' object boxes."""
    return scene_results(decoded, source)["grounding"]


def evaluate_checkpoint(
    checkpoint: str | Path | Sequence[str | Path],
    source: CaptionSource,
    data_name: str = "",
    decoding: dict[str, Any] | None = None,
    tokenizer: str = "ptb",
    metrics: tuple[str, ...] | None = None,  # None: every registered caption metric (TEXT_METRICS)
    batch_size: int = 50,
    cache_dir: str | Path | None = None,
    device: str = "cpu",
    rerank: RerankConfig | None = None,
    bank_source: CaptionSource | None = None,
    seed: int = 0,
) -> Evaluation:
    """Decode ``source`` with the checkpoint and score it. ``decoding`` options (HF ``generate`` names)
    override the checkpoint's; ``None`` values keep them. Several checkpoints are decoded as their
    ensemble (``captioning.checkpoints.ensemble``: one shared encoder, the decoders' mean distribution).

    With ``cache_dir`` and a frozen encoder, grid features are read from (or added to) the feature cache
    there, the same one training used; otherwise images go through the encoder.

    With ``rerank``, captions are chosen among candidates by consensus (``captioning.inference.consensus``)
    with a caption bank of ``bank_source`` (the training split) built with the same encoder.

    ``seed`` seeds the sampler of ``do_sample`` (recorded in the scores: the same seed, the same captions).
    """
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63:
        raise ValueError(f"seed={seed!r}: expected an integer in [0, 2**63)")
    paths = [checkpoint] if isinstance(checkpoint, str | Path) else list(checkpoint)
    if rerank is not None:  # options the reranking sets itself: refused before anything is loaded
        rerank.check_decoding(decoding or {}, "decoding")
    model = load_captioners(paths)
    model.net.to(device)
    context = (decoding or {}).get("hard_attention")
    if context is not None and not hard_attention_layers(model.net.decoder):
        raise ValueError(
            f"{members_label(paths)}: decoding.hard_attention={context!r}: this model's attention is soft (no "
            "layer chooses one cell), so the option would change nothing; it applies to hard-attention models"
        )
    decoding = GenerationConfig.from_dict(model.decoding).replace(**(decoding or {})).to_dict()
    if decoding["num_return_sequences"] != 1:
        raise ValueError("evaluate scores one caption per image: decoding.num_return_sequences must be 1")
    cache = frozen_feature_cache(model, cache_dir, device)
    reranker = None
    if rerank is not None:
        if bank_source is None:
            raise ValueError("rerank needs a bank_source: the training split whose captions vote")
        reranker = ConsensusReranker(rerank, build_caption_bank(model, bank_source, cache))
    generator = torch.Generator(device=device).manual_seed(seed)
    decoded = decode_source(model, source, decoding, batch_size, cache, reranker, generator)
    decoded_ids = set(decoded.image_ids)  # unreadable images are left out of the scores (and reported)
    references = {
        source.image_id(i): list(source.captions(i))
        for i in range(len(source))
        if source.image_id(i) in decoded_ids
    }
    report = evaluate_results(decoded.results(), references, metrics=metrics, tokenizer=tokenizer)
    scenes = scene_results(decoded, source) if isinstance(source, SyntheticSource) else None
    params = {
        "total": sum(p.numel() for p in model.net.parameters()),
        "trainable": sum(p.numel() for p in model.net.parameters() if p.requires_grad),
    }
    return Evaluation(
        members_label(paths), data_name, decoding, report, decoded, scenes, params,
        rerank.to_dict() if rerank is not None else None, seed,
    )  # fmt: skip


def evaluation_outputs(
    out_dir: str | Path, checkpoints: Sequence[str | Path] = (), check_folder: bool = False
) -> tuple[Output, Output]:
    """``results.json`` and ``scores.json`` in ``out_dir``, checked now (captioning/writes.py): never a
    folder, a device, a model file or one of ``checkpoints``; with ``check_folder``, also that the folder
    can be made and written (a folder the user named, checked before the work). Otherwise that is left to
    the write, so that the scores are printed before an unwritable folder fails."""
    inputs = {c: f"a checkpoint being evaluated ({c})" for c in checkpoints}
    return (
        output(
            Path(out_dir) / "results.json",
            "the results (COCO format)",
            inputs=inputs,
            check_folder=check_folder,
        ),
        output(Path(out_dir) / "scores.json", "the scores", inputs=inputs, check_folder=check_folder),
    )


def write_evaluation(
    evaluation: Evaluation, out_dir: str | Path, checkpoints: Sequence[str | Path] = ()
) -> tuple[Path, Path]:
    """Write ``results.json`` (COCO results format) and ``scores.json``, each atomically
    (:func:`evaluation_outputs`); returns their paths. An OSError names the file and why."""
    results, scores = evaluation_outputs(out_dir, checkpoints)
    results.write_text(json.dumps(evaluation.decoded.results(), indent=1) + "\n")
    payload = {**evaluation.to_dict(), "results_file": results.path.name}  # beside it: no absolute paths
    scores.write_text(json.dumps(payload, indent=2) + "\n")
    return results.path, scores.path


def format_evaluation(evaluation: Evaluation, results_path: str | Path | None = None) -> str:
    """The printed report: decoding settings, the toolkit table, skipped metrics, NLTK BLEU, and on synthetic
    scenes one line per scene metric (captioning.metrics.report.format_scene_metrics)."""
    d = evaluation.decoding
    lines = [
        f"checkpoint: {evaluation.checkpoint}",
        "decoding: " + " ".join(f"{k}={v}" for k, v in d.items()),
        *(
            ["rerank: " + " ".join(f"{k}={v}" for k, v in evaluation.rerank.items())]
            if evaluation.rerank
            else []
        ),
        # The header reads "<results> vs <data>/<split>: N images, tokenizer=...".
        format_report(
            evaluation.report, Path(results_path or "results"), Path(evaluation.data or "references")
        ),
    ]
    if evaluation.decoded.skipped:
        lines.append(
            f"skipped {len(evaluation.decoded.skipped)} unreadable images (not scored); the first: "
            f"{evaluation.decoded.skipped[0]}"
        )
    if evaluation.scenes is not None:
        lines += format_scene_metrics(evaluation.scenes)
    return "\n".join(lines)
