"""A SLURM job that comes back after a requeue (preemption, or its own requeue before the time limit) goes
on from its ``last.ckpt`` by itself: nobody adds ``ckpt_path=last`` to a job that SLURM restarts.

How a run survives SLURM, end to end:

1. Preemption (``scontrol requeue JOB``, a partition with ``PreemptMode=REQUEUE``): SLURM sends SIGTERM.
   Lightning stops after the current batch and ``PeriodicCheckpoint`` saves ``last.ckpt`` there; the
   process exits 143 and SLURM starts the job again, with ``SLURM_RESTART_COUNT`` one higher.
2. Time limit: SLURM sends the warning signal ``--signal=USR1@SECONDS`` before it (submitit's launcher
   sends USR2). ``SlurmRequeue`` (callbacks/slurm_requeue.py) answers it on global rank 0 with
   ``scontrol requeue $SLURM_JOB_ID``, which is step 1 again: SIGTERM, save, exit, start again.
3. The restarted job runs the same command. :func:`resume_requeued` sees ``SLURM_RESTART_COUNT > 0`` and
   no ``ckpt_path`` in the config, and makes it ``ckpt_path=auto``: ``last.ckpt`` if the run saved one,
   a fresh start if it was preempted before its first save, and nothing at all if the run had already
   finished (its ``run.json`` says so): a finished job is never trained again.

One owner of the signals: ``SlurmRequeue``. Lightning's own ``SLURMEnvironment(auto_requeue=True)`` is
switched off by it (that handler saves ``hpc_ckpt_N.ckpt`` from inside the signal handler, which may land
between two parameter updates of a step, into the working folder that every job of a sweep shares, and
Lightning resumes from there whenever ``ckpt_path`` is None), and submitit's checkpointing is off
(``max_num_timeout: 0`` in conf/hydra/launcher/slurm.yaml, and its USR2 handler is replaced).
"""

from __future__ import annotations

import os
import sys

from omegaconf import DictConfig, open_dict

from captioning.training.resume import AUTO


def restart_count() -> int:
    """How many times SLURM has started this job again (0 outside SLURM or on the first start)."""
    value = os.environ.get("SLURM_RESTART_COUNT", "")
    return int(value) if value.isdigit() else 0


def slurm_job_id() -> str | None:
    """The id ``scontrol requeue`` takes: ``ARRAYJOB_TASK`` for a job array's task, else SLURM_JOB_ID."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return os.environ.get("SLURM_JOB_ID") or None


def resume_requeued(cfg: DictConfig) -> None:
    """In a requeued SLURM job without a ``ckpt_path``, set ``ckpt_path=auto`` (module docstring). An
    explicit ``ckpt_path`` is kept: the person who wrote it chose what to resume."""
    if restart_count() == 0 or cfg.get("ckpt_path") not in (None, ""):
        return
    with open_dict(cfg):
        cfg.ckpt_path = AUTO
    print(
        f"SLURM job {slurm_job_id()} restarted (SLURM_RESTART_COUNT={restart_count()}): ckpt_path=auto, "
        f"going on from {cfg.output_dir}/checkpoints/last.ckpt if the run saved one",
        file=sys.stderr,
        flush=True,
    )
