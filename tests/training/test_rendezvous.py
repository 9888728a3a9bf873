"""A DDP rendezvous that cannot happen ends the run with one line naming MASTER_ADDR, its port and the node:
at once when the master's name does not resolve, after trainer.strategy.timeout_s when nobody answers.

Rank 1 of a 2-process world is started alone, as torchrun starts it on a second node
(TORCHELASTIC_RUN_ID, RANK, WORLD_SIZE, ...): its master never comes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from captioning.training.distributed import DDPStrategy

from support import TINY

DDP_RANK_1 = [
    *TINY,
    "trainer=ddp",
    "trainer.accelerator=cpu",
    "trainer.precision=32-true",
    "trainer.devices=1",
    "trainer.num_nodes=2",
    "trainer.strategy.timeout_s=4",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_rank_1(tmp_path: Path, master: str, port: int) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "TORCHELASTIC_RUN_ID": "test",
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "GROUP_RANK": "1",
        "MASTER_ADDR": master,
        "MASTER_PORT": str(port),
    }
    cmd = [
        sys.executable,
        "-m",
        "captioning.training.train",
        *DDP_RANK_1,
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)


@pytest.mark.slow
def test_an_unresolvable_master_ends_the_run_at_once_with_one_line(tmp_path: Path) -> None:
    proc = _run_rank_1(tmp_path, "no-such-node.invalid", 29500)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert last.startswith(
        "captioning-train: error: MASTER_ADDR=no-such-node.invalid does not resolve on node "
    )
    assert "global rank 1 of 2" in last and "cannot be retrieved" not in proc.stderr


@pytest.mark.slow
def test_an_unreachable_master_ends_the_run_after_the_timeout_with_one_line(tmp_path: Path) -> None:
    port = _free_port()  # nothing listens there
    proc = _run_rank_1(tmp_path, "127.0.0.1", port)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert last.startswith(
        f"captioning-train: error: no rendezvous at MASTER_ADDR=127.0.0.1 MASTER_PORT={port} within "
        "trainer.strategy.timeout_s=4 s on node "
    ), last
    assert "Traceback" not in proc.stderr


def test_the_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="timeout_s=0: expected seconds > 0"):
        DDPStrategy(timeout_s=0)
    assert DDPStrategy(timeout_s=7)._timeout.total_seconds() == 7  # what init_process_group receives
