"""The local SLURM cluster of scripts/slurm_local.sh (two nodes, n1 and n2, on 127.0.0.1), started once for
tests/cluster/ and stopped after it, unless it was already running. Without root (or apt-get, or with
daemons that do not start) the tests skip with the script's one line saying why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO

SCRIPT = REPO / "scripts" / "slurm_local.sh"
# where a job finds the captioning package (found, not imported: a second, not torch's import time)
FIND_CAPTIONING = "import importlib.util; print(importlib.util.find_spec('captioning').origin)"


@pytest.fixture(scope="session")
def slurm(tmp_path_factory) -> dict[str, str]:
    """The environment a job submitted from here needs: SLURM_CONF, this Python's bin folder first on PATH
    (the jobs run ``captioning-train``), this checkout first on PYTHONPATH (checked: a job on the cluster
    finds ``captioning`` here), one thread per process (2 cores shared by several ranks)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    was_running = subprocess.run([SCRIPT, "status"], env=env, capture_output=True).returncode == 0
    if not was_running:
        started = subprocess.run([SCRIPT, "start"], env=env, capture_output=True, text=True, timeout=900)
        if started.returncode == 3:
            pytest.skip(started.stderr.strip().splitlines()[-1])
        assert started.returncode == 0, started.stderr[-3000:]
    conf = subprocess.run([SCRIPT, "env"], capture_output=True, text=True).stdout.split("=", 1)[1].strip()
    # The jobs import this checkout's code (and the tests' helpers, support.*), whichever checkout the
    # Python's editable install points at: sbatch passes the environment on to every job.
    path = os.pathsep.join(filter(None, [str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH")]))
    job_env = {**env, "SLURM_CONF": conf, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    job_env.update(PYTHONPATH=path, HF_HUB_OFFLINE="1")
    try:
        where = subprocess.run(
            ["srun", "--nodes=1", sys.executable, "-c", FIND_CAPTIONING],
            env=job_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert where.stdout.strip() == str(REPO / "captioning" / "__init__.py"), where.stdout + where.stderr
        yield job_env
    finally:
        if not was_running:
            subprocess.run([SCRIPT, "stop"], env=env, capture_output=True, timeout=120)
