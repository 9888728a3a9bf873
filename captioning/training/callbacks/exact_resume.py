"""ExactResume: a run resumed from ``last.ckpt`` goes on as the uninterrupted run would have: the same
batches in the same order (captioning/data/resumable.py) and the same random draws (dropout masks, SCST's
sampled captions, Gumbel noise), so a preempted and requeued job ends with the uninterrupted run's weights
(tests/training/test_requeue.py).

- Random generators: Python's, NumPy's and torch's (CUDA's per device too) travel in the checkpoint as
  plain lists and tensors, which ``torch.load(weights_only=True)`` reads; under DDP every process's own.
  ``seed_everything`` alone would replay the first steps' random numbers on the resumed steps.
- The loader's position: Lightning saves a stateful training loader's ``state_dict`` and loads it when it
  sets up the training data. But the learning-rate schedule asks for ``trainer.estimated_stepping_batches``
  while the optimizers are configured, before the checkpoint is restored, and that sets the data up (and
  draws the first batch) early, so the saved position is never applied. ``on_train_start`` runs after the
  restore: it applies the position and starts the epoch's iterator again.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
import torch.distributed as dist


class ExactResume(pl.Callback):
    def state_dict(self) -> dict[str, Any]:
        state = _generators()
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            # Every DDP process's own: they draw differently (rank 0 alone scores a validation, for one), and
            # rank 0 alone writes the checkpoint. Every process builds it (Trainer.save_checkpoint), so all
            # take part in the gather.
            ranks: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(ranks, state)
            state = {**state, "ranks": ranks}  # rank 0's at the top too: what one process resumes with
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        ranks = state.get("ranks") or [state]
        if rank < len(ranks):
            _set_generators(ranks[rank])
        else:  # a process the checkpoint did not have (resumed on more GPUs): streams of its own
            _set_generators(state)
            seed = int(torch.randint(2**31, (1,)).item()) + rank  # a function of rank 0's state and the rank
            random.seed(seed)
            np.random.seed(seed)
            torch.manual_seed(seed)  # the CPU's and every GPU's generator

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        loop = trainer.fit_loop
        states, combined = loop._combined_loader_states_to_load, loop._combined_loader
        if not (states and combined is not None and loop._data_fetcher is not None):
            return  # a fresh run, or a loader without a saved position
        # Not loop._load_combined_loader_states(): it loads only when Lightning restarts inside an epoch, and
        # a checkpoint saved at an epoch's end resumes "between epochs", where the iterator made before the
        # restore (the first epoch's order) would otherwise train the next epoch
        combined._load_state_dicts(states)  # the loaders' load_state_dict (ResumableLoader's position)
        loop._combined_loader_states_to_load = []
        iter(loop._data_fetcher)  # the resumed epoch's iterator, from that position


def _generators() -> dict[str, Any]:
    """This process's random generators, as plain lists and tensors."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss],
        "python": [version, list(internal), gauss_next],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_generators(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
