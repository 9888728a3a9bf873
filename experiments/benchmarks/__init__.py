"""Benchmark parts of scripts/bench.py: timing, training step, decoding, encoders, the reference oracle."""
