"""Checkpoints: safe loading (closed registry), atomic saving, weights-only exports."""
