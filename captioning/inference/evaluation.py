"""Evaluate a checkpoint on a data split: decode every image, score with the official toolkit, write files.

The decoding is ``captioning.inference.split_decoding`` (the one batch decoder over a split); here it is
scored and written. The one path behind ``captioning evaluate``, ``scripts/compare.py`` and the tests:

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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig

from captioning.checkpoints.ensemble import load_checkpoints, members_label
from captioning.data.readers import DatasetError
from captioning.data.sources import CaptionSource, MissingSplit, SyntheticSource
from captioning.inference.batch_decoder import BatchDecoder
from captioning.inference.consensus import ConsensusReranker, RerankConfig
from captioning.inference.split_decoding import (  # noqa: F401 - evaluate's parts, importable from here
    SplitCaptions,
    build_caption_bank,
    decode_source,
    frozen_feature_cache,
    model_inputs,
    source_batches,
)
from captioning.inference.trained_on import (  # noqa: F401
    scene_vocabulary,
    synthetic_note,
    synthetic_words,
    trained_data,
)
from captioning.metrics.coco import EvalReport, evaluate_results
from captioning.metrics.names import SCENE_METRICS
from captioning.metrics.report import format_report, format_scene_metrics
from captioning.metrics.scenes import score_scenes
from captioning.writes import Output, output

SPLITS = ("train", "val", "test")


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
    # what the scores cannot mean (a synthetic-scene model scored on photos)
    notes: list[str] = field(default_factory=list)

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
            "notes": self.notes,
        }


def build_source(data_cfg: DictConfig, split: str) -> CaptionSource:
    """Instantiate only the source of ``split`` from a data config; a split the data set does not have is
    an error saying which exist (never another split under its name)."""
    if split not in SPLITS:
        dev = "; a dev split (Flickr8k's name) is split=val" if split.lower() == "dev" else ""
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}{dev}")
    node = data_cfg.get(split)
    if node is None:
        have = [s for s in SPLITS if data_cfg.get(s) is not None]
        raise ValueError(f"the data config has no {split!r} split (it has {', '.join(have)})")
    source = hydra.utils.instantiate(node)
    if isinstance(source, MissingSplit):
        raise DatasetError(source.reason)
    return source


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
    ensemble (``captioning.checkpoints.ensemble``: each member over its own encoder's grid, the decoders'
    mean distribution).

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
    loaded = load_checkpoints(paths)
    loaded.net.to(device)
    decoding = (
        BatchDecoder.of(loaded)
        .generation_config(loaded.decoding, decoding or {}, members_label(paths), "decoding.")
        .to_dict()
    )
    if decoding["num_return_sequences"] != 1:
        raise ValueError("evaluate scores one caption per image: decoding.num_return_sequences must be 1")
    cache = frozen_feature_cache(loaded, cache_dir, device)
    reranker = None
    if rerank is not None:
        if bank_source is None:
            raise ValueError("rerank needs a bank_source: the training split whose captions vote")
        reranker = ConsensusReranker(rerank, build_caption_bank(loaded, bank_source, cache))
    generator = torch.Generator(device=device).manual_seed(seed)
    decoded = decode_source(loaded, source, decoding, batch_size, cache, reranker, generator)
    decoded_ids = set(decoded.image_ids)  # unreadable images are left out of the scores (and reported)
    references = {
        source.image_id(i): list(source.captions(i))
        for i in range(len(source))
        if source.image_id(i) in decoded_ids
    }
    report = evaluate_results(decoded.results(), references, metrics=metrics, tokenizer=tokenizer)
    scenes = scene_results(decoded, source) if isinstance(source, SyntheticSource) else None
    notes = []  # what the scores cannot mean
    if scenes is None and scene_vocabulary(loaded.vocab.itos):  # a scene model's words scored on photos
        notes.append(f"{synthetic_note(members_label(paths))}; scored on {data_name or 'other data'}")
    params = {
        "total": sum(p.numel() for p in loaded.net.parameters()),
        "trainable": sum(p.numel() for p in loaded.net.parameters() if p.requires_grad),
    }
    return Evaluation(
        members_label(paths), data_name, decoding, report, decoded, scenes, params,
        rerank.to_dict() if rerank is not None else None, seed, notes,
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
