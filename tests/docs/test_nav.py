"""Every page of the site is placed on purpose: in mkdocs.yml's nav, or matched by its ``not_in_nav``
(records a results page links). mkdocs warns about any other page (``validation: omitted_files: warn``)
and ``--strict`` turns the warning into a failed build; this finds the page without building the site."""

from __future__ import annotations

import pathspec
import yaml

from support import REPO

DOCS = REPO / "docs"


def _config() -> dict:
    # mkdocs.yml may hold !! tags (none today); the plain loader would refuse them, so ignore unknown ones
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("", lambda loader, suffix, node: None)
    return yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Loader)


def _nav_pages(node) -> set[str]:
    if isinstance(node, str):
        return {node} if node.endswith(".md") else set()
    if isinstance(node, dict):
        return set().union(*(_nav_pages(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_nav_pages(v) for v in node)) if node else set()
    return set()


def test_every_page_is_in_the_nav_or_declared_a_record() -> None:
    config = _config()
    nav = _nav_pages(config["nav"])
    records = pathspec.GitIgnoreSpec.from_lines(config.get("not_in_nav", "").splitlines())
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    placed = {p for p in pages if p in nav or records.match_file(p)}
    assert sorted(pages - placed) == []
    assert sorted(nav - pages) == []  # a nav entry whose page is gone


def test_a_page_left_out_fails_the_strict_build() -> None:
    config = _config()
    assert config["strict"] is True and config["validation"]["omitted_files"] == "warn"
    records = pathspec.GitIgnoreSpec.from_lines(config["not_in_nav"].splitlines())
    assert records.match_file("results/flickr8k/soft_vs_hard/xe/runs.md")
    assert not records.match_file("guides/which-model.md") and not records.match_file("results/flickr8k.md")
