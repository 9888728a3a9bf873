"""ExactResume (captioning/training/callbacks/exact_resume.py): every process resumes its own random
generators; a process the checkpoint did not have gets streams of its own, not rank 0's."""

from __future__ import annotations

import random

import numpy as np
import torch
import torch.distributed as dist

from captioning.training.callbacks.exact_resume import ExactResume


def _as_rank(monkeypatch, rank: int, world: int) -> None:
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: world)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: rank)


def _draws() -> tuple[float, float, float]:
    return random.random(), float(np.random.rand()), float(torch.rand(()))


def test_each_saved_process_resumes_its_own_draws_and_a_new_one_draws_its_own(monkeypatch):
    ranks = []
    for seed in (1, 2):  # what two processes saved
        torch.manual_seed(seed), np.random.seed(seed), random.seed(seed)
        ranks.append(ExactResume().state_dict())
    saved = {**ranks[0], "ranks": ranks}

    def resumed(rank: int, world: int) -> tuple[float, float, float]:
        _as_rank(monkeypatch, rank, world)
        ExactResume().load_state_dict(saved)
        return _draws()

    torch.manual_seed(2), np.random.seed(2), random.seed(2)
    rank1 = _draws()
    assert resumed(1, 2) == rank1  # rank 1 goes on with rank 1's generators
    extra = [resumed(rank, 4) for rank in (2, 3)]  # resumed on 4 GPUs
    assert resumed(0, 4) not in extra and extra[0] != extra[1]  # neither rank 0's nor each other's
    assert resumed(2, 4) == extra[0]  # and repeatable: a function of the checkpoint and the rank
