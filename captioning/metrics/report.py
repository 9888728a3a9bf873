"""The human-readable table of an evaluation report (``captioning score`` and ``captioning evaluate``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from captioning.metrics.coco import EvalReport
from captioning.metrics.scenes import scene_metrics


def format_report(report: EvalReport, results: Path, references: Path) -> str:
    """The human-readable table printed by ``captioning score``."""
    lines = [
        f"{results} vs {references}: {report.num_images} images, tokenizer={report.tokenizer}",
        "metric      score (the toolkit's scale: 0-1, CIDEr-D 0-10; papers print x100)",
    ]
    lines += [f"{name:<10}  {value:.4f}" for name, value in report.scores.items()]
    if report.skipped:
        lines.append("skipped:")
        lines += [f"  {name:<8}  {reason}" for name, reason in report.skipped.items()]
    lines.append("NLTK corpus_bleu cross-check on the same tokens (0-1 scale):")
    for name, value in report.nltk_bleu.items():
        toolkit = report.scores.get(name)
        diff = f"  (pycocoevalcap {toolkit:.4f}, diff {value - toolkit:+.1e})" if toolkit is not None else ""
        lines.append(f"  {name:<8}  {value:.4f}{diff}")
    return "\n".join(lines)


def format_scene_metrics(results: Mapping[str, Any]) -> list[str]:
    """One line per registered scene metric with a ``format``, in registry order (``captioning evaluate``)."""
    return [m.format(results[m.name]) for m in scene_metrics() if m.format is not None and m.name in results]
