"""Inference: the Python API (Captioner), split evaluation, attention overlays."""
