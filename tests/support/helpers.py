"""Test helpers: build decoders and nets from the real composed configs; random captions for the metrics."""

from __future__ import annotations

import random

import torch

from captioning.models.attention.reinforce import ReinforceHardAttention
from captioning.training.build import build_net as build_net_from_config

from support import TINY, compose_train


def build_net(decoder: str = "soft", vocab_size: int = 12, extra: list[str] | None = None, seed: int = 0):
    cfg = compose_train([f"model/decoder={decoder}", *TINY, *(extra or [])])
    torch.manual_seed(seed)
    return build_net_from_config(cfg.model, vocab_size)


def random_batch(net, batch: int = 3, steps: int = 5, vocab_size: int = 12, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    grid = net.encoder.grid_size
    features = torch.randn(batch, grid * grid, net.encoder.out_dim, generator=g)  # (B, L, D)
    tokens = torch.randint(4, vocab_size, (batch, steps), generator=g)
    tokens[:, 0] = 1  # <start>
    return features, tokens


def assert_step_matches_forward(decoder, features, tokens, full) -> None:
    """init_state/step reproduce teacher-forced ``full = decoder(features, tokens)`` token by token."""
    state = decoder.init_state(features)
    for t in range(tokens.shape[1]):
        logits, att, state = decoder.step(tokens[:, t], state)
        torch.testing.assert_close(logits, full.logits[:, t], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(att, full.attention[:, t], atol=1e-5, rtol=1e-5)


# REINFORCE as the paper states it, before the recipe's curriculum (the constructor's defaults).
PLAIN_REINFORCE = {"baseline": "moving_average", "num_samples": 1, "credit": "caption", "semi_sampling_final": None,
                   "entropy_weight_final": None, "anneal_steps": 0, "entropy_anneal_start": 0}  # fmt: skip


def reinforce_layer(**kwargs) -> ReinforceHardAttention:
    """A small REINFORCE attention layer in training mode: the plain estimator (one sample, a moving-average
    baseline, the caption's reward for every location, no curriculum), no entropy bonus, every batch
    sampled, unless the keyword arguments say otherwise (the constructor's defaults are the tuned recipe of
    captioning/conf/model/decoder/attention/hard_reinforce.yaml)."""
    kwargs = {"entropy_weight": 0.0, "semi_sampling_p": 0.0, **PLAIN_REINFORCE, **kwargs}
    return ReinforceHardAttention(feature_dim=5, query_dim=4, attention_dim=6, **kwargs).train()


CAPTION_WORDS = [
    "a",
    "man",
    "dog",
    "red",
    "ball",
    "on",
    "the",
    "grass",
    "runs",
    "with",
    "two",
    "children",
    "in",
    "park",
]


def random_caption(rng: random.Random) -> str:
    """1-12 words drawn from a small vocabulary, so n-grams repeat across captions (metric equality tests)."""
    return " ".join(rng.choice(CAPTION_WORDS) for _ in range(rng.randint(1, 12)))
