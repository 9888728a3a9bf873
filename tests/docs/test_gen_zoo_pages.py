"""The zoo's facts quoted by the docs (the home page's "Shipped models" line, the table of "Which model
should I use?") are what scripts/gen_zoo_pages.py generates from the zoo: a new or retrained model needs
the script rerun, never a hand edit."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from captioning.zoo import MODELS
from experiments import gen_zoo_pages

from support import REPO


def test_the_generated_blocks_are_current() -> None:
    run = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_zoo_pages.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-3000:]


def test_the_home_page_names_the_zoo_size_and_the_best_measured_model() -> None:
    home = (REPO / "docs" / "index.md").read_text(encoding="utf-8")
    scored = gen_zoo_pages.scored_models()
    best = max(scored, key=lambda r: r.scores["CIDEr"])
    assert f"{gen_zoo_pages.count_word(len(MODELS))} weights-only exports" in home
    assert f"[`{best.name}`]" in home and f"reaches {best.scores['CIDEr']:.1f} dev CIDEr-D" in home
    # every Flickr8k model of the zoo is in the table, each once, best first
    assert len(scored) == sum(m.data == "flickr8k" for m in MODELS.values())
    ciders = [r.scores["CIDEr"] for r in scored]
    assert ciders == sorted(ciders, reverse=True)


def test_scores_come_from_the_file_the_stored_row_links(tmp_path) -> None:
    (tmp_path / "r.json").write_text(json.dumps({"scores": {"CIDEr": 0.5724, "Bleu_4": 0.2361}}))
    card = tmp_path / "m.md"
    card.write_text(
        "| decoding | CIDEr-D | file |\n|---|---|---|\n"
        "| beam 1 | 50.0 | [`x.json`](x.json) |\n"
        "| **stored**: beam 5 | 99.9 | [`r.json`](r.json) |\n"  # the card's digits are not read
        "Captioning: 0.17 s per photo at the stored decoding\n"
    )
    assert gen_zoo_pages.stored_result_file(card) == tmp_path / "r.json"
    scores = gen_zoo_pages.scores_x100(gen_zoo_pages.stored_result_file(card))
    assert round(scores["CIDEr"], 2) == 57.24 and round(scores["Bleu_4"], 2) == 23.61
    assert gen_zoo_pages.seconds_per_photo(card) == 0.17


def test_a_card_without_a_stored_row_is_named(tmp_path) -> None:
    card = tmp_path / "m.md"
    card.write_text("| beam 1 | 50.0 | [`x.json`](x.json) |\n")
    with pytest.raises(ValueError, match=r"m\.md: no '\| \*\*stored\*\*' row"):
        gen_zoo_pages.stored_result_file(card)


def test_a_block_without_its_markers_is_an_error_not_a_silent_skip(tmp_path) -> None:
    assert gen_zoo_pages.fill(
        "a\n<!-- zoo-facts:x -->\nold\n<!-- /zoo-facts:x -->\nb", "x", "new", tmp_path
    ) == ("a\n<!-- zoo-facts:x -->\nnew\n<!-- /zoo-facts:x -->\nb")
    with pytest.raises(ValueError, match="missing the markers"):
        gen_zoo_pages.fill("no markers", "x", "new", tmp_path)


def test_the_flickr8k_results_page_opens_with_the_zoo_table() -> None:
    page = (REPO / "docs" / "results" / "flickr8k.md").read_text(encoding="utf-8")
    first_table = page.index("\n| ")
    assert page.index("<!-- zoo-facts:results -->") < first_table < page.index("<!-- /zoo-facts:results -->")
    best = gen_zoo_pages.scored_models()[0]
    assert page[first_table:].split("\n")[3].startswith(f"| [`{best.name}`]")  # header, rule, best model
