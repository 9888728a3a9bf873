"""A training loader that a run resumed mid-epoch continues exactly where it stopped.

Lightning saves the ``state_dict`` of a training DataLoader that has one in every checkpoint and hands it
back, on resume, before the first batch is drawn (``FitLoop._load_combined_loader_states``). With a plain
shuffled loader a run resumed mid-epoch draws a fresh permutation and sees some images twice and others not
at all in that epoch; a preempted SLURM job then ends with other weights than an uninterrupted one.

Here the order of epoch ``e`` is a function of the run's seed and ``e`` alone (``torch.initial_seed()``,
which ``seed_everything`` set, plus ``e``): no draw from the global generator, so the order does not depend
on what ran before. The state is (epoch, batches already trained in it); the resumed epoch skips those
batches' indices without reading their images.

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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler


class EpochShuffle(DistributedSampler):
    """This process's share of a permutation of ``range(len(data))`` fixed by (seed, epoch); its ``skip``
    leading indices dropped. The processes are torch.distributed's, read when an epoch starts or the
    length is asked for (the loader may be built before the process group exists); one without it."""

    def __init__(self, data: Dataset, seed: int) -> None:
        super().__init__(data, num_replicas=1, rank=0, shuffle=True, seed=seed, drop_last=False)
        self.skip = 0

    def _shard(self) -> None:
        distributed = dist.is_available() and dist.is_initialized()
        world, rank = (dist.get_world_size(), dist.get_rank()) if distributed else (1, 0)
        self.num_replicas, self.rank = world, rank
        self.num_samples = math.ceil(len(self.dataset) / world)
        self.total_size = self.num_samples * world

    def __iter__(self) -> Iterator[int]:
        self._shard()
        return iter(list(super().__iter__())[self.skip :])

    def __len__(self) -> int:
        self._shard()
        return self.num_samples


class ResumableLoader(DataLoader):
    """A shuffled DataLoader whose position (epoch, batches trained in it) travels in the checkpoint.

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
        # ``sampler``: another order (Lightning passes one when it rebuilds a loader, e.g. to predict)
        sampler = EpochShuffle(dataset, seed=torch.initial_seed()) if sampler is None else sampler
        # Lightning passes the generator back when it rebuilds the loader: the same one again
        kw["generator"] = kw.get("generator") or torch.Generator()
        super().__init__(dataset, batch_size=batch_size, sampler=sampler, **kw)
        self._position, self._epochs_iterated, self._resume = position, 0, None

    def __iter__(self):
        sampler = self.sampler
        if not isinstance(sampler, EpochShuffle):  # another sampler: its own epochs
            return super().__iter__()
        if self._resume is not None:  # the first epoch after a resume: where the checkpoint left it
            sampler.epoch, batches = self._resume
            sampler.skip = batches * self.batch_size
            self._resume = None
        else:
            where = self._position()
            sampler.epoch, sampler.skip = (where[0] if where else self._epochs_iterated), 0
        self._epochs_iterated = sampler.epoch + 1
        # the iterator's draw (workers' base seed) from this generator: none from the global one (above)
        self.generator.manual_seed(sampler.seed + sampler.epoch)
        return super().__iter__()

    def state_dict(self) -> dict[str, int]:
        epoch, batches = self._position() or (self._epochs_iterated, 0)
        if batches * self.batch_size >= len(self.sampler):  # saved after the epoch's last batch: the next one
            epoch, batches = epoch + 1, 0
        return {"epoch": epoch, "batches": batches}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._resume = (int(state["epoch"]), int(state["batches"]))
