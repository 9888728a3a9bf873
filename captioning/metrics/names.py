"""Metric and tokenizer names (light: the CLI's argument parser reads them without loading the toolkit)."""

METRICS = ("Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "METEOR", "ROUGE_L", "CIDEr", "SPICE")
TOKENIZERS = ("ptb", "simple", "none")
