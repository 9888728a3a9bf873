"""A training loader that a run resumed mid-epoch continues exactly where it stopped.

Lightning saves the ``state_dict`` of a training DataLoader that has one in every checkpoint and hands it
back, on resume, before the first batch is drawn (``FitLoop._load_combined_loader_states``). With a plain
shuffled loader a run resumed mid-epoch draws a fresh permutation and sees some images twice and others not
at all in that epoch; a preempted SLURM job then ends with other weights than an uninterrupted one.

Here the order of epoch ``e`` is a function of the run's seed and ``e`` alone (the data module's
``order_seed``, torch's initial seed when it was built, which ``seed_everything`` set, plus ``e``): no draw
from the global generator, so the order does not depend on what ran before, and every DDP process shares
it though each draws its own random numbers (training/distributed.py). The state is (epoch, batches
already trained in it, the seed); the resumed epoch skips those batches' indices without reading their
images.

Starting an epoch's iterator draws nothing from the global generator either. A DataLoader iterator draws
its workers' base seed when it is created, from the loader's ``generator`` or, without one, from torch's
global generator, which also gives dropout its masks. A resumed run creates the iterator at other moments
than the uninterrupted run did (``ExactResume`` creates the resumed epoch's again, after the restore of
the generators' states), so every resumed step drew other dropout masks and the weights drifted, though
batches and generator states matched at the resume (tests/training/test_requeue.py). Here the loader has
a generator of its own, seeded by (seed, epoch) when the epoch starts: the base seed (hence the workers'
random augmentations) is a function of the epoch too.

Under DDP each process takes its share of the epoch's order (``DistributedSampler``'s: padded to a
multiple of the processes, every process's ``rank``-th index), and a resumed epoch skips the batches each
process trained. The sampler is a ``DistributedSampler``, so Lightning keeps it instead of putting its own
in (``use_distributed_sampler`` still shards the validation data); Lightning's own would start a resumed
epoch from its beginning. In one process the order is the same permutation as before.

The position is saved in samples of the epoch's order as well as in batches: the processes' shares
interleave (process r takes positions r, r + W, r + 2W, ...), so after b batches of B on each of W
processes exactly the first b·B·W positions are trained. A run resumed with another number of processes
or another batch size (a requeue onto fewer GPUs) goes on with the rest of that epoch's order, shared
among its own processes, and says in one line what else differs from an uninterrupted run.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler

_log = logging.getLogger(__name__)


def _world() -> tuple[int, int]:
    """(processes, this one's rank): torch.distributed's, or (1, 0) without a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def _padded(indices: list[int], multiple: int) -> list[int]:
    """``indices`` repeated cyclically to a length that is a multiple of ``multiple`` (DistributedSampler's
    padding, so that every process gets as many)."""
    size = math.ceil(len(indices) / multiple) * multiple
    return (indices * math.ceil(size / len(indices)))[:size] if indices else []


@dataclass(frozen=True)
class Resumed:
    """Where a resumed epoch starts: the first ``samples`` positions of its order, padded for
    ``order_world`` processes, were trained (``batches`` on each of them, the count the trainer restores)."""

    epoch: int
    batches: int
    samples: int
    order_world: int


class EpochShuffle(DistributedSampler):
    """This process's share of a permutation of ``range(len(data))`` fixed by (seed, epoch). With
    ``resumed`` (the epoch a run resumed in), the share of what that epoch's order had left. The processes
    are torch.distributed's, read when an epoch starts or the length is asked for (the loader may be built
    before the process group exists); one without it."""

    def __init__(self, data: Dataset, seed: int) -> None:
        super().__init__(data, num_replicas=1, rank=0, shuffle=True, seed=seed, drop_last=False)
        self.resumed: Resumed | None = None
        self.share = 0  # the length of this process's share of the epoch being iterated

    def _shard(self) -> None:
        world, rank = _world()
        self.num_replicas, self.rank = world, rank
        self.num_samples = math.ceil(len(self.dataset) / world)
        self.total_size = self.num_samples * world

    def __iter__(self) -> Iterator[int]:
        self._shard()
        # DistributedSampler's order and padding; in the epoch a run resumed in, what the saving processes'
        # padded order had left after its first ``samples`` positions, shared among these processes
        order = torch.randperm(
            len(self.dataset), generator=torch.Generator().manual_seed(self.seed + self.epoch)
        )
        resumed = self.resumed if self.resumed is not None and self.resumed.epoch == self.epoch else None
        start, padded_for = (resumed.samples, resumed.order_world) if resumed else (0, self.num_replicas)
        rest = _padded(order.tolist(), padded_for)[start:]
        indices = _padded(rest, self.num_replicas)[self.rank :: self.num_replicas]  # every num_replicas-th
        self.share = len(indices)
        return iter(indices)

    def __len__(self) -> int:
        self._shard()
        return self.num_samples


class ResumableLoader(DataLoader):
    """A shuffled DataLoader whose position (epoch, batches and samples trained in it) travels in the
    checkpoint.

    ``position`` returns (the trainer's current epoch, batches trained in it so far), or None outside a fit;
    it is read when Lightning asks for the state, at a checkpoint save."""

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int,
        position: Callable[[], tuple[int, int] | None],
        sampler: Sampler | None = None,
        **kw,
    ):
        # ``sampler``: the training order (the data module's EpochShuffle, whose seed every DDP process shares),
        # or another (Lightning passes one when it rebuilds a loader, e.g. to predict). Without one, an order
        # seeded with torch's seed now: under DDP that is the run's only before a process reseeds its draws
        sampler = EpochShuffle(dataset, seed=torch.initial_seed()) if sampler is None else sampler
        # Lightning passes the generator back when it rebuilds the loader: the same one again
        kw["generator"] = kw.get("generator") or torch.Generator()
        super().__init__(dataset, batch_size=batch_size, sampler=sampler, **kw)
        self._position, self._epochs_iterated = position, 0

    def __iter__(self):
        sampler = self.sampler
        if not isinstance(sampler, EpochShuffle):  # another sampler: its own epochs
            return super().__iter__()
        if sampler.resumed is not None and self._epochs_iterated == 0:  # the first epoch after a resume
            sampler.epoch = sampler.resumed.epoch
        else:
            where = self._position()
            sampler.epoch = where[0] if where else self._epochs_iterated
        self._epochs_iterated = sampler.epoch + 1
        # the iterator's draw (workers' base seed) from this generator: none from the global one (above)
        self.generator.manual_seed(sampler.seed + sampler.epoch)
        return super().__iter__()

    def state_dict(self) -> dict[str, int]:
        """(epoch, batches trained in it on each process, samples of its order trained, the number of
        processes its order was padded for, the order's seed); the next epoch's start once this process's
        share is done."""
        epoch, batches = self._position() or (self._epochs_iterated, 0)
        world, _ = _world()
        resumed = getattr(self.sampler, "resumed", None)
        if resumed is not None and resumed.epoch == epoch:  # positions after the resumed ones
            done = batches - resumed.batches  # this run's batches of the epoch
            share = getattr(self.sampler, "share", 0) or len(self.sampler)
            samples, order_world = resumed.samples + done * self.batch_size * world, resumed.order_world
        else:
            done, share, samples, order_world = (
                batches,
                len(self.sampler),
                batches * self.batch_size * world,
                world,
            )
        if done * self.batch_size >= share:  # saved after the epoch's last batch: the next one
            epoch, batches, samples, order_world = epoch + 1, 0, 0, world
        state = {"epoch": epoch, "batches": batches, "samples": samples, "order_world": order_world,
                 "batch_size": self.batch_size}  # fmt: skip
        if isinstance(self.sampler, EpochShuffle):
            state["seed"] = self.sampler.seed
        return state

    def load_state_dict(self, state: dict[str, int]) -> None:
        """A checkpoint's position, in the checkpoint's order: a run resumed with another ``seed`` goes on with
        the order it was interrupted in (another would train part of the epoch twice and skip the rest). One
        from before ``samples`` (or the seed) was saved is read as this run's layout (and seed)."""
        world, rank = _world()
        if isinstance(self.sampler, EpochShuffle) and "seed" in state:
            if int(state["seed"]) != self.sampler.seed and rank == 0:
                _log.warning(
                    "resuming with the checkpoint's training order (seed %d), not this run's seed %d",
                    int(state["seed"]), self.sampler.seed,
                )  # fmt: skip
            self.sampler.seed = int(state["seed"])
        epoch, batches = int(state["epoch"]), int(state["batches"])
        saved_world = int(state.get("order_world", world))
        saved_batch = int(state.get("batch_size", self.batch_size))
        samples = int(state.get("samples", batches * saved_batch * saved_world))
        if isinstance(self.sampler, EpochShuffle):
            self.sampler.resumed = Resumed(epoch, batches, samples, saved_world)
        self._epochs_iterated = 0
        if (saved_world, saved_batch) != (world, self.batch_size) and rank == 0 and samples:
            _log.warning(
                "resuming epoch %d after %d samples of its order with %d process(es) x batch %d (saved with "
                "%d x %d): the rest of the epoch's order is shared among this run's processes; the "
                "learning-rate schedule's length and the random draws of processes the checkpoint did not "
                "have are not an uninterrupted run's",
                epoch, samples, world, self.batch_size, saved_world, saved_batch,
            )  # fmt: skip
