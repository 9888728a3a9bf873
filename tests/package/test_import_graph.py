"""The package's import graph (docs/design/architecture.md, "Import rule"), computed by
``experiments/gen_architecture.py`` (every module parsed with ``ast``: imports at any level, function-local
ones too):

* no two modules import each other, directly or round a longer cycle, and no two top-level packages do;
* the libraries never import the entry points (``captioning.cli``, ``captioning.api``,
  ``captioning.training.train``), the
  entry points other than the CLI never import ``captioning.cli`` (process settings are in
  ``captioning.runtime``, config composition in ``captioning.compose``), and nothing in ``captioning``
  imports ``experiments`` (benchmarks, sweeps, doc generators);
* training may use the inference-level libraries, never the reverse: outside ``captioning.training`` and
  the entry points nothing imports ``captioning.training``;
* ``captioning.errors`` imports no captioning module (the user-error types subclass its ``UserError``);
* the layer drawings in README.md and the architecture page are the ones the imports give;
* no file of the repository edits ``sys.path`` (experiments is a declared package, tests import it);
* ``import captioning`` in a fresh process changes nothing in it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

from experiments.gen_architecture import (
    PACKAGE,
    _within,
    cycles,
    external_imports,
    generated_pages,
    import_graph,
    package_graph,
)

from support import REPO

ENTRY_POINTS = ("captioning.cli", "captioning.api", "captioning.training.train")


def _edge(graph: dict[str, dict[str, int]], a: str, b: str) -> str:
    return f"{a} -> {b} ({a.replace('.', '/')}.py line {graph[a][b]})"


def test_the_graph_sees_every_kind_of_import() -> None:
    graph = import_graph()
    assert "captioning.checkpoints.load" in graph["captioning.checkpoints.export"]  # top-level from-import
    assert "captioning.zoo" in graph["captioning.cli.paths"]  # a function-local import
    assert "captioning.decoding.search" in graph["captioning.decoding"]  # package __init__
    assert len(graph) > 50


def test_no_import_cycles() -> None:
    graph = import_graph()
    found = []
    for component in cycles(graph):
        members = set(component)
        found += [_edge(graph, a, b) for a in component for b in graph[a] if b in members]
    assert not found, "import cycles between modules:\n  " + "\n  ".join(found)


def test_libraries_never_import_the_entry_points() -> None:
    graph = import_graph()
    bad = []
    for module, edges in graph.items():
        for target in edges:
            entry = next((e for e in ENTRY_POINTS if _within(target, e)), None)
            if entry is None or _within(module, entry):
                continue  # not an entry point, or the entry point's own modules (the CLI's argparse helpers)
            if (
                _within(module, "captioning.cli") or module == "captioning.api"
            ) and entry != "captioning.cli":
                continue  # `captioning train` / `captioning bench` / `captioning.train()` run the others
            bad.append(_edge(graph, module, target))
    assert not bad, "imports of an entry point (cli, api, training.train):\n  " + "\n  ".join(bad)


def test_the_library_never_imports_experiments() -> None:
    found = external_imports(PACKAGE, "experiments")
    assert not found, "captioning imports the experiments package:\n  " + "\n  ".join(found)


def test_no_import_cycles_between_packages() -> None:
    packages = package_graph(import_graph())
    assert {"models", "data", "decoding", "training", "cli"} <= packages.keys()
    assert "models" in packages["decoding"] and "decoding" not in packages["models"]  # an edge's direction
    assert not cycles(packages), f"packages importing each other: {cycles(packages)}"


def test_the_layer_drawings_are_the_ones_the_imports_give() -> None:
    stale = [
        str(page.relative_to(REPO))
        for page, (text, generated) in generated_pages().items()
        if text != generated
    ]
    assert not stale, f"stale layer drawing in {stale}: run python scripts/gen_architecture.py"


def test_nothing_in_the_repository_edits_sys_path() -> None:
    edit = re.compile(r"sys\.path\s*(\.\s*(insert|append|extend)\s*\(|\[.*\]\s*=|\s*[+]?=)")
    found = [
        f"{path.relative_to(REPO)} line {number}"
        for folder in ("captioning", "experiments", "scripts", "tests", "notebooks")
        for path in sorted((REPO / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if edit.search(line)
    ]
    assert not found, "sys.path edited (import the experiments package instead):\n  " + "\n  ".join(found)


def test_only_training_and_the_entry_points_import_training() -> None:
    graph = import_graph()
    allowed = ("captioning.training", *ENTRY_POINTS)
    bad = [
        _edge(graph, module, target)
        for module, edges in graph.items()
        if not any(_within(module, prefix) for prefix in allowed)
        for target in edges
        if _within(target, "captioning.training")
    ]
    assert not bad, "library modules importing captioning.training:\n  " + "\n  ".join(bad)


def test_errors_imports_no_captioning_module() -> None:
    graph = import_graph()
    assert not graph["captioning.errors"], "captioning.errors imports " + ", ".join(
        graph["captioning.errors"]
    )


SNAPSHOT = """
import json, logging, os, sys, warnings
import torch

def state():
    loggers = [logging.getLogger()] + [
        lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)
    ]
    return {
        "env": dict(os.environ),
        "torch_threads": [torch.get_num_threads(), torch.get_num_interop_threads()],
        "warning_filters": [repr(f) for f in warnings.filters],
        "log_handlers": {lg.name: [repr(h) for h in lg.handlers] for lg in loggers if lg.handlers},
        "root_level": logging.getLogger().level,
        "default_dtype": str(torch.get_default_dtype()),
        "grad_enabled": torch.is_grad_enabled(),
        "recursion_limit": sys.getrecursionlimit(),
    }

before = state()
import captioning
after = state()
print(json.dumps({"before": before, "after": after, "version": captioning.__version__}))
"""


def test_import_captioning_changes_nothing_in_the_process() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SNAPSHOT], capture_output=True, text=True, check=True, timeout=300
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    before, after = result["before"], result["after"]
    changed = {key: (before[key], after[key]) for key in before if before[key] != after[key]}
    if "env" in changed:
        env_before, env_after = changed["env"]
        changed["env"] = {k: (env_before.get(k), env_after.get(k)) for k in env_before.keys() | env_after.keys()
                          if env_before.get(k) != env_after.get(k)}  # fmt: skip
    assert not changed, f"import captioning changed the process: {changed}"


def test_import_captioning_loads_nothing_heavy() -> None:
    code = "import sys, captioning; print(sorted(m for m in ('torch', 'hydra', 'pytorch_lightning') if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    assert out.stdout.strip() == "[]", f"import captioning loaded {out.stdout.strip()}"
