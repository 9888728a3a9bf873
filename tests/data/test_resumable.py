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
    state = _loader([2, 3]).state_dict()  # 3 batches: this process's share
    assert (state["epoch"], state["batches"], state["samples"]) == (3, 0, 0)
    state = _loader([2, 2]).state_dict()  # 2 batches of 4 on each of 2 processes: the order's first 16
    assert (state["epoch"], state["batches"], state["samples"], state["order_world"]) == (2, 2, 16, 2)


def _epoch_order(epoch: int, world: int) -> list[int]:
    full = torch.randperm(N, generator=torch.Generator().manual_seed(SEED + epoch)).tolist()
    size = -(-N // world) * world
    return (full * 2)[:size]  # DistributedSampler's padding for `world` processes


def test_a_run_resumed_on_other_processes_and_batches_trains_exactly_the_rest_of_the_epoch(
    monkeypatch, caplog
):
    # Saved by 2 processes after 1 batch of 4 each: the order's first 8 positions are trained. Resumed on 3
    # processes with batches of 3, the 3 shares interleave over exactly the rest (padded for 3), and a save
    # inside the resumed epoch counts the positions after the first 8, for a second resume on 1 process.
    torch.manual_seed(SEED)
    epoch, order = 3, _epoch_order(3, 2)
    _as_rank(monkeypatch, 0)
    saved = _loader([epoch, 1]).state_dict()
    assert (saved["samples"], saved["order_world"], saved["batch_size"]) == (8, 2, 4)
    rest = order[8:]  # 14 positions
    shares = {}
    for rank in (0, 1, 2):
        _as_rank(monkeypatch, rank, world=3)
        resumed = ResumableLoader(list(range(N)), 3, position=lambda: (epoch, 1 + 2), collate_fn=list)
        with caplog.at_level("WARNING", logger="captioning.data.resumable"):
            resumed.load_state_dict(saved)
        shares[rank] = [i for batch in resumed for i in batch]
        if rank == 0:  # after 2 more batches of 3 on each of 3 processes: 8 + 18 positions, past the 16 left
            assert resumed.state_dict()["epoch"] == epoch + 1
    padded_rest = (rest * 2)[:15]  # 14 left, padded to a multiple of 3
    assert [shares[k % 3][k // 3] for k in range(15)] == padded_rest  # interleaved: the rest in order
    assert sorted(set(order[:8]) | set(padded_rest)) == list(range(N))  # every item once in the epoch
    [line] = [r.getMessage() for r in caplog.records]  # rank 0 says it, once
    assert "3 process(es) x batch 3 (saved with 2 x 4)" in line and "after 8 samples" in line

    _as_rank(monkeypatch, 0, world=3)
    resumed = ResumableLoader(list(range(N)), 3, position=lambda: (epoch, 1 + 1), collate_fn=list)
    resumed.load_state_dict(saved)
    list(resumed)
    again = resumed.state_dict()  # one batch of 3 on 3 processes after the first 8
    assert (again["epoch"], again["samples"], again["order_world"]) == (epoch, 8 + 9, 2)
    _as_rank(monkeypatch, 0, world=1)
    single = ResumableLoader(list(range(N)), 5, position=lambda: None, collate_fn=list)
    single.load_state_dict(again)
    assert [i for batch in single for i in batch] == order[17:]


def test_a_checkpoint_without_samples_resumes_as_before(monkeypatch):
    # Saved before the position counted samples: (epoch, batches) read with this run's processes and batch.
    _as_rank(monkeypatch, 1)
    share = list(_loader([3, 0]))
    old, new = _loader(), _loader()
    old.load_state_dict({"epoch": 3, "batches": 1})
    new.load_state_dict({"epoch": 3, "batches": 1, "samples": 8, "order_world": 2, "batch_size": 4})
    assert list(old) == list(new) == share[1:]


def test_a_run_resumed_with_another_seed_goes_on_in_the_order_it_was_interrupted_in(monkeypatch, caplog):
    """The order's seed travels in the loader's state: the data module reads the run's seed when it is built
    (so DDP processes that reseed their draws share it), and a resume with ``seed=1`` of a run started with
    ``seed=0`` would otherwise take the rest of the epoch from another permutation."""
    torch.manual_seed(SEED)
    epoch = 2
    interrupted = _loader([epoch, 2])
    saved = interrupted.state_dict()
    assert saved["seed"] == SEED
    rest = [i for batch in _loader([epoch, 0]) for i in batch][2 * B :]
    torch.manual_seed(SEED + 1)  # the resumed run's other seed
    resumed = _loader()
    with caplog.at_level("WARNING", logger="captioning.data.resumable"):
        resumed.load_state_dict(saved)
    assert [i for batch in resumed for i in batch] == rest
    assert [r.getMessage() for r in caplog.records] == [
        f"resuming with the checkpoint's training order (seed {SEED}), not this run's seed {SEED + 1}"
    ]
    resumed._position = lambda: (epoch + 1, 0)  # the next epoch: the interrupted run's order too
    expected = torch.randperm(N, generator=torch.Generator().manual_seed(SEED + epoch + 1)).tolist()
    assert [i for batch in resumed for i in batch] == expected
