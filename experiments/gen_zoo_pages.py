"""Write the zoo's facts into the docs pages that quote them, from the zoo itself (no hand-copied numbers):
the home page's "Shipped models" line (docs/index.md), the table of docs/guides/which-model.md and the
opening table of docs/results/flickr8k.md.

    python scripts/gen_zoo_pages.py           # (re)write the generated blocks
    python scripts/gen_zoo_pages.py --check   # exit 1 if a committed block is not what the zoo gives

The facts come from: the closed registry ``captioning.zoo.MODELS`` (names, files, descriptions), the files
in docs/models/ (sizes), each Flickr8k model card's **stored** row, whose linked result file holds the
scores measured at the stored decoding (the card's digits are not read: the file is), the card's "Measured
cost" line (seconds per photo), and the consensus-reranking result files
(docs/results/flickr8k/rerank/*_consensus_dev_scores.json: each scores one set of zoo models reranked).

Only the text between ``<!-- zoo-facts:NAME -->`` and ``<!-- /zoo-facts:NAME -->`` is rewritten.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from experiments.generated_pages import write_or_check

REPO = Path(__file__).resolve().parents[1]
MODELS_DIR = REPO / "docs" / "models"
RERANK = REPO / "docs" / "results" / "flickr8k" / "rerank"
NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven"]


@dataclass(frozen=True)
class Scored:
    name: str  # the zoo name (flickr8k-soft-scst)
    card: str  # the card's file name, relative to docs/models (flickr8k_soft_scst.md)
    description: str
    size_mib: float
    scores: dict[str, float]  # x100, from the stored row's result file
    result_file: str  # relative to docs/
    seconds_per_photo: float | None


def _zoo():
    from captioning.zoo import MODELS

    return MODELS


def stored_result_file(card: Path) -> Path:
    """The result file linked from the card's **stored** row (the scores at the stored decoding)."""
    for line in card.read_text(encoding="utf-8").splitlines():
        if line.startswith("| **stored**"):
            link = re.search(r"\]\(([^)]+\.json)\)", line)
            if link:
                return (card.parent / link.group(1)).resolve()
    raise ValueError(f"{card}: no '| **stored**' row linking a .json result file")


def scores_x100(result: Path) -> dict[str, float]:
    scores = json.loads(result.read_text(encoding="utf-8"))["scores"]
    return {k: 100 * float(v) for k, v in scores.items() if isinstance(v, (int, float))}


def seconds_per_photo(card: Path) -> float | None:
    match = re.search(r"([0-9]+(?:\.[0-9]+)?) s per photo", card.read_text(encoding="utf-8"))
    return float(match.group(1)) if match else None


def scored_models() -> list[Scored]:
    """Every Flickr8k model of the zoo with its stored-decoding scores, best CIDEr-D first."""
    rows = []
    for model in _zoo().values():
        if model.data != "flickr8k":
            continue
        card = MODELS_DIR / (Path(model.file).stem + ".md")
        result = stored_result_file(card)
        rows.append(
            Scored(
                name=model.name,
                card=card.name,
                description=model.description.split(";")[0],
                size_mib=(MODELS_DIR / model.file).stat().st_size / 2**20,
                scores=scores_x100(result),
                result_file=result.relative_to(REPO / "docs").as_posix(),
                seconds_per_photo=seconds_per_photo(card),
            )
        )
    return sorted(rows, key=lambda r: -r.scores["CIDEr"])


def best_reranking() -> tuple[float, int, str]:
    """(CIDEr-D x100, number of models, result file relative to docs/) of the best consensus reranking
    of zoo models measured (one file per set of models; the files of other seeds are left out)."""
    best = None
    for path in sorted(RERANK.glob("*_consensus_dev_scores.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        models = len(str(data["checkpoint"]).split(" + "))
        row = (100 * float(data["scores"]["CIDEr"]), models, path.relative_to(REPO / "docs").as_posix())
        if best is None or row[0] > best[0]:
            best = row
    if best is None:
        raise ValueError(f"no *_consensus_dev_scores.json in {RERANK}")
    return best


def count_word(n: int) -> str:
    return NUMBERS[n] if n < len(NUMBERS) else str(n)


def home_facts() -> str:
    zoo, scored = _zoo(), scored_models()
    top = scored[0]
    cider, models, _ = best_reranking()
    return (
        f"- **Shipped models**: {count_word(len(zoo))} weights-only exports in `docs/models/` "
        f"([model zoo](models/index.md), [which one to use](guides/which-model.md)), each captioning raw "
        f"photos on a CPU; the best single model, [`{top.name}`](models/{top.card}), reaches "
        f"{top.scores['CIDEr']:.1f} dev CIDEr-D on Flickr8k, and {cider:.1f} with consensus reranking of "
        f"{count_word(models)} ([results](results/flickr8k.md))."
    )


def which_model_table() -> str:
    lines = [
        "| model | what it is | CIDEr-D | BLEU-4 | METEOR | size | s per photo (CPU, 1 thread) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in scored_models():
        speed = f"{r.seconds_per_photo:.2f}" if r.seconds_per_photo is not None else "–"
        lines.append(
            f"| [`{r.name}`](../models/{r.card}) | {r.description} | "
            f"[{r.scores['CIDEr']:.1f}](../{r.result_file}) | {r.scores['Bleu_4']:.1f} | "
            f"{r.scores['METEOR']:.1f} | {r.size_mib:.1f} MiB | {speed} |"
        )
    return "\n".join(lines)


def rerankings() -> list[tuple[dict[str, float], list[str], str]]:
    """(scores x100, the zoo models' names, result file relative to docs/) of every consensus reranking
    of two or more zoo models measured, best CIDEr-D first."""
    rows = []
    for path in sorted(RERANK.glob("*_consensus_dev_scores.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        names = [Path(c.strip()).stem.replace("_", "-") for c in str(data["checkpoint"]).split(" + ")]
        if len(names) > 1:
            scores = {k: 100 * float(v) for k, v in data["scores"].items() if isinstance(v, (int, float))}
            rows.append((scores, names, path.relative_to(REPO / "docs").as_posix()))
    return sorted(rows, key=lambda r: -r[0]["CIDEr"])


METRICS = ["Bleu_1", "Bleu_4", "METEOR", "ROUGE_L", "CIDEr"]


def results_table() -> str:
    """The current Flickr8k table of docs/results/flickr8k.md: every zoo model, then the rerankings."""
    lines = [
        "| model | BLEU-1 | BLEU-4 | METEOR | ROUGE-L | CIDEr-D | result file |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in scored_models():
        cells = " | ".join(f"{r.scores[m]:.1f}" for m in METRICS)
        lines.append(
            f"| [`{r.name}`](../models/{r.card}): {r.description} | {cells} | "
            f"[`{Path(r.result_file).name}`](../{r.result_file}) |"
        )
    for scores, names, result in rerankings():
        cells = " | ".join(f"{scores[m]:.1f}" for m in METRICS)
        lines.append(
            f"| consensus reranking of {count_word(len(names))}: {', '.join(names)} | {cells} | "
            f"[`{Path(result).name[:40]}...`](../{result}) |"
        )
    return "\n".join(lines)


BLOCKS = {
    REPO / "docs" / "index.md": {"home": home_facts},
    REPO / "docs" / "guides" / "which-model.md": {"table": which_model_table},
    REPO / "docs" / "results" / "flickr8k.md": {"results": results_table},
}


def fill(text: str, name: str, body: str, where: Path) -> str:
    start, end = f"<!-- zoo-facts:{name} -->", f"<!-- /zoo-facts:{name} -->"
    if start not in text or end not in text:
        raise ValueError(f"{where}: missing the markers {start} ... {end}")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body}\n{end}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed block is stale")
    args = parser.parse_args(argv)
    pages = {}
    for path, blocks in BLOCKS.items():
        text = path.read_text(encoding="utf-8")
        for name, make in blocks.items():
            text = fill(text, name, make(), path)
        pages[path] = text
    return write_or_check(pages, args.check, "scripts/gen_zoo_pages.py")


if __name__ == "__main__":
    sys.exit(main())
