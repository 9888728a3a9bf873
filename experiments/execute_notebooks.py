"""`make notebooks`: execute the notebooks in place, so that they are committed with their figures.

    python scripts/execute_notebooks.py [NAME ...]   (default: every notebook under notebooks/)

Each runs in notebooks/ with the environment it is given (CAPTIONING_CHECKPOINT, CAPTIONING_RESULTS, ...);
unset, the walkthrough reads the committed docs/models/synthetic_soft.safetensors and the comparison
the committed docs/results/synthetic/results.json."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def main(names: list[str]) -> int:
    paths = [NOTEBOOKS / f"{n}.ipynb" for n in names] or sorted(NOTEBOOKS.glob("*.ipynb"))
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        NotebookClient(
            nb, kernel_name="python3", timeout=600, resources={"metadata": {"path": str(NOTEBOOKS)}}
        ).execute()
        for cell in nb.cells:  # reviewable diffs: no execution timestamps
            cell.get("metadata", {}).pop("execution", None)
        nbformat.write(nb, path)
        size = path.stat().st_size / 1024
        print(f"executed {path.relative_to(NOTEBOOKS.parent)} ({size:.0f} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
