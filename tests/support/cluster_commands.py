"""The SLURM commands of the docs, as the docs write them, and their CPU form for the local cluster
(scripts/slurm_local.sh: two nodes of 4 CPUs, no GPU).

A documented cluster command is the fenced block after an ``<!-- cluster-test: NAME -->`` line (an HTML
comment: invisible on GitHub and on the site). ``tests/cluster/test_slurm.py`` runs every one of them on
the local cluster; ``tests/docs/test_cluster_commands.py`` checks, without a cluster, that each is still
there and that its CPU form can be made. The CPU form is the block's text with the substitutions of
``CPU_FORM`` and nothing else; each one must match the block exactly once, so a docs edit that changes a
substituted part fails the tests instead of silently running something else.
"""

from __future__ import annotations

import re

from support import REPO

MARK = re.compile(r"^<!-- cluster-test: (\S+) -->\n```[^\n]*\n(.*?)\n```", re.M | re.S)

# The tiny run the CPU forms append to the captioning-train arguments: the tests' sizes (debug=tiny), on
# the CPU in fp32 (trainer=ddp asks for GPUs and bf16), one epoch (the recipes train for many).
TINY_CPU = "debug=tiny trainer.accelerator=cpu trainer.precision=32-true trainer.max_epochs=1"


# block -> (page, [(documented text, CPU text, why)]). A block that starts with ``#!`` is a batch script:
# the test submits it with ``sbatch --parsable --output=...``; any other block runs in ``bash -e``.
CPU_FORM: dict[str, tuple[str, list[tuple[str, str, str]]]] = {
    "sbatch-template": (
        "docs/guides/cluster.md",
        [
            ("--ntasks-per-node=8", "--ntasks-per-node=1", "one rank per node: no GPUs to give each a rank"),
            (
                "--gpus-per-node=8",
                "--cpus-per-task=1",
                "no GPUs; the template's 8 CPUs a task exceed a node's 4",
            ),
            (
                "data.num_workers=6",
                f"data.num_workers=0 {TINY_CPU}",
                "no loader processes; the tiny CPU run",
            ),
        ],
    ),
    "sweep": (
        "docs/guides/sweeps.md",
        [
            ("pip install 'captioning[slurm]'", "true", "installed already (the dev extras); no network"),
            (
                "hydra.launcher.partition=gpu",
                "hydra.launcher.partition=debug",
                "the local cluster's partition",
            ),
            ("hydra.launcher.cpus_per_task=8", "hydra.launcher.cpus_per_task=1", "a local node has 4 CPUs"),
            (
                "trainer.devices=8",
                "trainer.devices=1 hydra.launcher.gpus_per_node=null",
                "one rank a job, and no GPUs to ask for (gpus_per_node follows trainer.devices)",
            ),
            ("data.num_workers=6", f"data.num_workers=0 {TINY_CPU}", "no loader processes; the tiny CPU run"),
            (
                "2>&1 &",
                "2>&1 &\nwait",
                "the test waits for the backgrounded sweep (a person reads sweep.log)",
            ),
        ],
    ),
    "wandb-srun": (
        "docs/wandb_ddp.md",
        [
            ("--ntasks-per-node=4", "--ntasks-per-node=1", "one rank per node: no GPUs to give each a rank"),
            ("#SBATCH --gres=gpu:4\n", "", "no GPUs"),
            ("--cpus-per-task=8", "--cpus-per-task=1", "a local node has 4 CPUs"),
            ("trainer.devices=4", "trainer.devices=1", "one rank a node, as --ntasks-per-node"),
            (
                "data.num_workers=6",
                f"data.num_workers=0 {TINY_CPU}",
                "no loader processes; the tiny CPU run",
            ),
        ],
    ),
    "coco-srun": (
        "docs/guides/coco.md",
        [
            ("--ntasks-per-node=8", "--ntasks-per-node=1", "one rank per node: no GPUs to give each a rank"),
            ("#SBATCH --gres=gpu:8\n", "", "no GPUs"),
            ("--cpus-per-task=8", "--cpus-per-task=1", "a local node has 4 CPUs"),
            (
                "model.scheduler.warmup_steps=500",
                f"model.scheduler.warmup_steps=500 {TINY_CPU} trainer.devices=1 data.feature_cache.device=cpu "
                "data.feature_cache.progress=false data.min_word_count=1",
                "the tiny CPU run on the COCO replica (one rank a node, features on the CPU, its few words)",
            ),
        ],
    ),
}


def marked_blocks(page: str) -> dict[str, str]:
    """``{name: code}`` of the blocks ``page`` marks ``<!-- cluster-test: NAME -->``."""
    return dict(MARK.findall((REPO / page).read_text(encoding="utf-8")))


def documented(name: str) -> str:
    page, _ = CPU_FORM[name]
    blocks = marked_blocks(page)
    if name not in blocks:
        raise AssertionError(
            f"{page}: no block marked <!-- cluster-test: {name} --> (tests/support/cluster_commands.py)"
        )
    return blocks[name]


def cpu_form(name: str) -> str:
    """The documented block ``name`` with its CPU_FORM substitutions, each required to match once."""
    page, substitutions = CPU_FORM[name]
    code = documented(name)
    for old, new, _ in substitutions:
        if code.count(old) != 1:
            raise AssertionError(
                f"{page} block {name}: {old!r} occurs {code.count(old)} times, expected once; "
                "update CPU_FORM in tests/support/cluster_commands.py with the docs"
            )
        code = code.replace(old, new)
    return code
