"""The notebooks run top to bottom (nbclient, the venv's python3 kernel) against tiny checkpoints."""

from __future__ import annotations

import json
import statistics

import nbformat
import pytest
from nbclient import NotebookClient
from PIL import Image

from captioning.checkpoints.load import load_checkpoint
from captioning.data.synthetic import render_scene
from captioning.inference.captioner import Captioner

from support import REPO

NOTEBOOKS = REPO / "notebooks"


@pytest.fixture(scope="module")
def checkpoints(make_checkpoint) -> dict[str, str]:
    """A soft and a hard attention checkpoint, built (the notebook captions with them, nothing trains)."""
    return {
        d: str(make_checkpoint(f"{d}.ckpt", extra=[f"model/decoder={d}"])) for d in ("soft", "hard_gumbel")
    }


def execute(name: str, cwd) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    # The kernel inherits this process's environment (the CAPTIONING_* variables set by the tests).
    NotebookClient(
        nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(cwd)}}
    ).execute()
    return nb


def tagged(nb, tag: str):
    (cell,) = [c for c in nb.cells if tag in c.metadata.get("tags", [])]
    return cell


def stdout(cell) -> str:
    return "".join(o["text"] for o in cell.outputs if o["output_type"] == "stream" and o["name"] == "stdout")


def count_pngs(nb) -> int:
    return sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)


@pytest.mark.parametrize("name", ["attention_walkthrough", "compare_soft_hard"])
def test_notebooks_are_committed_executed_with_their_figures(name):
    """A reader on GitHub sees the figures: committed executed (make notebooks), small, no machine paths."""
    path = NOTEBOOKS / f"{name}.ipynb"
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.execution_count is not None for c in code), "run `make notebooks`"
    assert not [o for c in code for o in c.outputs if o["output_type"] == "error"]
    assert count_pngs(nb) >= 2 and path.stat().st_size < 2_000_000
    assert str(REPO) not in path.read_text()
    assert nb.metadata.kernelspec.name == "python3"


@pytest.mark.slow
def test_attention_walkthrough(checkpoints, tmp_path, monkeypatch):
    monkeypatch.setenv("CAPTIONING_CHECKPOINT", checkpoints["soft"])
    monkeypatch.setenv("CAPTIONING_HARD_CHECKPOINT", checkpoints["hard_gumbel"])
    monkeypatch.delenv("CAPTIONING_IMAGES", raising=False)
    nb = execute("attention_walkthrough", tmp_path)

    # The notebook's captions are the CLI path's captions of the same scenes (beam 3).
    soft = load_checkpoint(checkpoints["soft"])
    images = [Image.fromarray(render_scene((2015, 7, i)).image) for i in range(3)]
    expected = Captioner(soft).caption(images, num_beams=3)
    lines = stdout(tagged(nb, "captions")).splitlines()
    names = [f"scene {i}" for i in range(3)]
    assert [line.split("\t")[:2] for line in lines] == [[n, c.caption] for n, c in zip(names, expected)]

    # Figures: the scenes, one overlay per scene, then soft and hard overlays of the first scene.
    assert count_pngs(nb) == 1 + 3 + 2
    comparison = stdout(tagged(nb, "soft_vs_hard")).splitlines()
    assert [line.split(":")[0] for line in comparison] == ["soft", "hard"]
    hard = load_checkpoint(checkpoints["hard_gumbel"])
    (hard_caption,) = Captioner(hard).caption(images[:1], num_beams=3)
    if hard_caption.tokens:  # one-hot rows: zero entropy (an empty caption has no rows to measure)
        assert "mean attention entropy 0.000 nats" in comparison[1]
    assert repr(hard_caption.caption) in comparison[1]


def fake_results() -> list[dict]:
    runs = []
    for decoder, base in (("soft", 0.60), ("hard_gumbel", 0.55)):
        for seed in range(3):
            scores = {f"Bleu_{n}": base / n + 0.01 * seed for n in range(1, 5)}
            scores.update(
                METEOR=None, ROUGE_L=base - 0.1, CIDEr=base + 0.02 * seed + (0.01 if seed == 2 else 0)
            )
            runs.append(
                {
                    "decoder": decoder,
                    "seed": seed,
                    **scores,
                    "train_minutes": 10.0 + seed,
                    "params": 2_500_000,
                }
            )
    return runs


@pytest.mark.slow
def test_compare_soft_hard(tmp_path, monkeypatch):
    runs = fake_results()
    results = tmp_path / "results.json"
    results.write_text(json.dumps(runs))
    monkeypatch.setenv("CAPTIONING_RESULTS", str(results))
    nb = execute("compare_soft_hard", tmp_path)

    (summary,) = [o for o in tagged(nb, "summary").outputs if "text/markdown" in o.get("data", {})]
    table = summary["data"]["text/markdown"].splitlines()
    header = [h.strip() for h in table[0].strip("|").split("|")]
    assert header == [
        "decoder",
        "runs",
        "Bleu_1",
        "Bleu_2",
        "Bleu_3",
        "Bleu_4",
        "ROUGE_L",
        "CIDEr",
        "train min",
        "params (M)",
    ]  # METEOR: null in every run, so left out
    rows = {
        r.strip("|").split("|")[0].strip(): [v.strip() for v in r.strip("|").split("|")] for r in table[2:]
    }
    for decoder in ("soft", "hard_gumbel"):
        cider = [100 * r["CIDEr"] for r in runs if r["decoder"] == decoder]
        assert rows[decoder][1] == "3"
        assert rows[decoder][7] == f"{statistics.mean(cider):.1f} ± {statistics.stdev(cider):.1f}"
        assert rows[decoder][9] == "2.50 ± 0.00"
    paired = stdout(tagged(nb, "paired"))
    assert "hard_gumbel - soft    CIDEr: -5.00 ± 0.00 over 3 seeds" in paired
    assert count_pngs(nb) == 2


@pytest.mark.slow
def test_compare_soft_hard_falls_back_to_the_committed_results(monkeypatch):
    if list((REPO / "outputs" / "compare").glob("**/results.json")):
        pytest.skip("a local outputs/compare run takes precedence over the committed results")
    monkeypatch.delenv("CAPTIONING_RESULTS", raising=False)
    nb = execute("compare_soft_hard", NOTEBOOKS)
    printed = "".join(
        o.get("text", "")
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o["output_type"] == "stream"
    )
    runs = len(json.loads((REPO / "docs" / "results" / "synthetic" / "results.json").read_text()))
    assert f"docs/results/synthetic/results.json: {runs} runs" in printed and str(REPO) not in printed
