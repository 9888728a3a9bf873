"""The docs' SLURM commands stay under test without a cluster: each block ``tests/cluster/test_slurm.py`` runs
is still marked ``<!-- cluster-test: NAME -->`` on its page, its CPU form can still be made (every
substitution of ``support.cluster_commands.CPU_FORM`` matches once), and no page submits to SLURM in a bash
block that is not marked (a new command would otherwise be documented untested)."""

from __future__ import annotations

import re

import pytest

from support import REPO
from support.cluster_commands import CPU_FORM, MARK, cpu_form

# A bash block that submits work to SLURM: an sbatch command, an #SBATCH script, the submitit launcher.
SUBMITS = re.compile(r"^\s*(sbatch |srun |#SBATCH )|hydra/launcher=slurm", re.M)
BASH_BLOCK = re.compile(r"^```bash\n(.*?)\n```", re.M | re.S)
# Documented SLURM blocks not run by tests/cluster, each with why (page -> reason).
NOT_RUN: dict[str, str] = {}


@pytest.mark.parametrize("name", sorted(CPU_FORM))
def test_each_cluster_command_is_marked_and_has_its_cpu_form(name):
    code = cpu_form(name)  # raises naming the page, the block and the substitution that no longer applies
    for old, new, why in CPU_FORM[name][1]:
        assert why, (name, old)  # every substitution says why
        assert new in code


def test_every_slurm_block_of_the_docs_is_marked_for_the_cluster_tests():
    unmarked = []
    for page in sorted(REPO.glob("docs/**/*.md")):
        rel = page.relative_to(REPO).as_posix()
        text = page.read_text(encoding="utf-8")
        marked = set(dict(MARK.findall(text)).values())
        for code in BASH_BLOCK.findall(text):
            if SUBMITS.search(code) and code not in marked and rel not in NOT_RUN:
                unmarked.append(f"{rel}: {code.splitlines()[0]}")
    assert not unmarked, (
        "SLURM blocks without <!-- cluster-test: NAME --> (tests/support/cluster_commands.py):\n"
        + "\n".join(unmarked)
    )
