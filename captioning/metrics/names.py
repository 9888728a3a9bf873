"""Metric and tokenizer names (light: the CLI's argument parser reads them without loading the toolkit)."""

METRICS = ("Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "METEOR", "ROUGE_L", "CIDEr", "SPICE")
# The registry of validation scores of synthetic scenes (captioning.metrics.scenes): name -> "module:attribute"
# of its SceneMetric, loaded only when scenes are scored (or the metric itself). Computed from the decoded
# captions and their attention during training, where the val source has scenes, and by `captioning evaluate`;
# not toolkit metrics. A new scene metric is its module plus one line here (docs/design/extending.md).
SCENE_METRICS: dict[str, object] = {
    "objects": "captioning.metrics.objects:METRIC",
    "grounding": "captioning.metrics.grounding:METRIC",
    "scene_score": "captioning.metrics.scenes:SCENE_SCORE",
}
TOKENIZERS = ("ptb", "simple", "none")
