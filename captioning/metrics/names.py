"""Metric and tokenizer names (light: the CLI's argument parser reads them without loading the toolkit)."""

METRICS = ("Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "METEOR", "ROUGE_L", "CIDEr", "SPICE")
# Validation scores of synthetic scenes (captioning.metrics.scenes): computed from the decoded captions and
# their attention during training, where the val source has scenes; not toolkit metrics.
SCENE_METRICS = ("objects", "grounding", "scene_score")
TOKENIZERS = ("ptb", "simple", "none")
