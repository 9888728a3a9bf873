"""ResumableLoader / EpochShuffle (captioning/data/resumable.py): an epoch's order is fixed by the seed and
the epoch, each DDP process takes its share of it, a resumed epoch goes on with the batches each process
had left, and starting an epoch draws nothing from torch's global generator."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler

from captioning.data.resumable import EpochShuffle, ResumableLoader

SEED, N, B = 7, 21, 4  # 21 items: two processes get 11 each (one index repeated), 3 batches of 4


def _loader(epoch_batches: list[int] | None = None) -> ResumableLoader:
    """A loader over ``range(N)`` whose trainer position is (epoch, batches) from ``epoch_batches``."""
    return ResumableLoader(
        list(range(N)),
        B,
        position=lambda: None if epoch_batches is None else tuple(epoch_batches),
        collate_fn=list,
    )


def _as_rank(monkeypatch, rank: int, world: int = 2) -> None:
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: world)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: rank)


def test_one_process_draws_the_seeded_permutation_of_each_epoch_and_nothing_from_the_global_generator():
    torch.manual_seed(SEED)
    loader, position = _loader(), [0, 0]
    loader._position = lambda: tuple(position)
    for epoch in (0, 1, 2):
        position[:] = [epoch, 0]
        before = torch.get_rng_state()
        order = [i for batch in loader for i in batch]
        assert torch.equal(torch.get_rng_state(), before)  # dropout masks do not depend on the loader
        expected = torch.randperm(N, generator=torch.Generator().manual_seed(SEED + epoch)).tolist()
        assert order == expected
    assert len(loader) == 6  # ceil(21 / 4)


@pytest.mark.parametrize("batches", [0, 1, 2])
def test_each_process_takes_its_share_and_a_resumed_epoch_goes_on_where_each_one_stopped(
    monkeypatch, batches: int
):
    torch.manual_seed(SEED)
    epoch = 3
    full = torch.randperm(N, generator=torch.Generator().manual_seed(SEED + epoch)).tolist()
    padded = full + full[: 22 - N]  # DistributedSampler's padding to a multiple of the processes
    shares = {}
    for rank in (0, 1):
        _as_rank(monkeypatch, rank)
        plain = _loader([epoch, 0])
        # a DistributedSampler: Lightning keeps it under DDP rather than putting in its own
        assert isinstance(plain.sampler, EpochShuffle) and isinstance(plain.sampler, DistributedSampler)
        shares[rank] = list(plain)
        assert [i for batch in shares[rank] for i in batch] == padded[rank::2]
        assert len(plain) == 3  # ceil(11 / 4) batches a process

        resumed = _loader()
        resumed.load_state_dict({"epoch": epoch, "batches": batches})  # `batches` trained on every process
        assert list(resumed) == shares[rank][batches:]
    assert sorted(i for rank in (0, 1) for batch in shares[rank] for i in batch) == sorted(padded)


def test_a_position_after_the_last_batch_of_a_process_share_is_the_next_epoch(monkeypatch):
    _as_rank(monkeypatch, 1)
    assert _loader([2, 3]).state_dict() == {"epoch": 3, "batches": 0}  # 3 batches: this process's share
    assert _loader([2, 2]).state_dict() == {"epoch": 2, "batches": 2}
