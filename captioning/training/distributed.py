"""DDP whose rendezvous either happens or fails fast, with one line naming MASTER_ADDR, its port and the node.

``torch.distributed`` waits for the rendezvous as long as the process-group timeout (torch's default: 30
minutes), and when the first node's name does not resolve it prints a c10d "cannot be retrieved" warning
every few seconds meanwhile: a job that cannot start sits there until SLURM's time limit. Here the timeout
is a setting (``trainer.strategy.timeout_s``, conf/trainer/ddp.yaml), the master's name is resolved before
anything waits on it, and a rendezvous that times out ends the run with :class:`RendezvousError` (one line,
exit status 2) on every rank that sees it.

Each process also gets random draws of its own (``_reseed_for_rank``): ``seed_everything`` gives every
process the run's seed, so without it all GPUs drew the same dropout masks, SCST samples and Gumbel noise.
The epoch's order stays shared (the data module fixed its seed when it was built: data/resumable.py).
"""

from __future__ import annotations

import os
import random
import socket
from datetime import timedelta

import numpy as np
import torch
from pytorch_lightning.strategies import DDPStrategy as LightningDDPStrategy

from captioning.errors import UserError, one_line


class RendezvousError(RuntimeError, UserError):
    """The processes of a DDP run could not meet at MASTER_ADDR:MASTER_PORT."""


def _node() -> str:
    """The node as SLURM names it (SLURMD_NODENAME), else the host name."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


class DDPStrategy(LightningDDPStrategy):
    def __init__(self, timeout_s: float = 300.0, **kwargs) -> None:
        """``timeout_s``: how long the rendezvous, and later every collective, may wait for the other
        ranks (seconds); the rest are Lightning's ``DDPStrategy`` arguments (``find_unused_parameters``,
        ``process_group_backend``, ...)."""
        if not timeout_s > 0:
            raise ValueError(f"timeout_s={timeout_s}: expected seconds > 0")
        super().__init__(timeout=timedelta(seconds=timeout_s), **kwargs)
        self.timeout_s = timeout_s

    def setup_environment(self) -> None:
        super().setup_environment()  # the process group: the global rank is known from here
        _reseed_for_rank(self.global_rank)

    def setup_distributed(self) -> None:
        environment = self.cluster_environment
        address, port = environment.main_address, environment.main_port
        where = f"node {_node()}, global rank {self.global_rank} of {self.world_size}"
        try:
            socket.getaddrinfo(address, port)
        except OSError as err:
            raise RendezvousError(
                f"MASTER_ADDR={address} does not resolve on {where} ({err.strerror or err}); "
                "expected the first node's name or address (set MASTER_ADDR, or fix the node's name lookup)"
            ) from err
        try:
            super().setup_distributed()
        except (RuntimeError, OSError) as err:  # torch's DistStoreError (a RuntimeError) on a timeout
            raise RendezvousError(
                f"no rendezvous at MASTER_ADDR={address} MASTER_PORT={port} within "
                f"trainer.strategy.timeout_s={self.timeout_s:g} s on {where}: {one_line(err)[:200]}"
            ) from err


def _reseed_for_rank(rank: int) -> None:
    """Python's, NumPy's and torch's generators (CUDA's too) seeded from (the run's seed, ``rank``) for every
    process but rank 0, which keeps the run's own streams (a one-process run draws as before). Runs before
    a checkpoint is restored, so a resumed run goes on with each process's saved streams
    (callbacks/exact_resume.py)."""
    if rank == 0:
        return
    # SeedSequence mixes the pair: seed + rank would give rank 1 of seed s the streams of rank 0 of seed s + 1
    seed = int(np.random.SeedSequence([torch.initial_seed(), rank]).generate_state(1)[0])
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # the CPU's and every GPU's generator
