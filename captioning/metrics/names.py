"""Metric and tokenizer names (light: the CLI's argument parser reads them without loading the toolkit)."""

# The registry of caption metrics (captioning.metrics.text): name -> "module:attribute" of the TextMetric that
# computes it (one may compute several names: BLEU-1..4 come from one pass), loaded only when scored. The
# order is the order of every table and scores.json. A new caption metric is its module plus one line here.
TEXT_METRICS: dict[str, object] = {
    "Bleu_1": "captioning.metrics.coco:BLEU",
    "Bleu_2": "captioning.metrics.coco:BLEU",
    "Bleu_3": "captioning.metrics.coco:BLEU",
    "Bleu_4": "captioning.metrics.coco:BLEU",
    "METEOR": "captioning.metrics.coco:METEOR",
    "ROUGE_L": "captioning.metrics.coco:ROUGE_L",
    "CIDEr": "captioning.metrics.coco:CIDER",
    "SPICE": "captioning.metrics.coco:SPICE",
}
# The names shipped; code that must see a metric registered later reads TEXT_METRICS.
METRICS = tuple(TEXT_METRICS)
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
