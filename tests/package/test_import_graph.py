"""The package's import graph (docs/design/architecture.md, "Import rule").

Every module of ``captioning`` is parsed with ``ast`` (imports at any level, function-local ones too):

* no two modules import each other, directly or round a longer cycle;
* the libraries never import the entry points (``captioning.cli``, ``captioning.api``,
  ``captioning.training.train``, ``captioning.benchmarks``), and the entry points other than the CLI never import ``captioning.cli``
  (process settings are in ``captioning.runtime``, config composition in ``captioning.config``);
* training may use the inference-level libraries, never the reverse: outside ``captioning.training`` and
  the entry points nothing imports ``captioning.training``;
* ``captioning.errors`` imports no captioning module (the user-error types subclass its ``UserError``);
* ``import captioning`` in a fresh process changes nothing in it.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "captioning"
ENTRY_POINTS = ("captioning.cli", "captioning.api", "captioning.training.train", "captioning.benchmarks")


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package ``__init__``) for every module of the package."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return modules


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported captioning module: line of the first such import}."""
    modules = _modules()

    def resolve(name: str) -> str | None:  # the longest known module prefix of an imported name
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for module, (path, is_package) in modules.items():
        package = module if is_package else module.rpartition(".")[0]
        imported: list[tuple[str, int]] = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                imported += [(alias.name, node.lineno) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from . import x, from ..a import b
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                for alias in node.names:  # `from pkg import submodule` imports the submodule
                    full = f"{source}.{alias.name}"
                    imported.append((full if full in modules else source, node.lineno))
        edges: dict[str, int] = {}
        for name, line in sorted(imported, key=lambda item: item[1]):
            target = resolve(name) if _within(name, "captioning") else None
            if target is not None and target != module:
                edges.setdefault(target, line)
        graph[module] = edges
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def _edge(graph: dict[str, dict[str, int]], a: str, b: str) -> str:
    return f"{a} -> {b} ({a.replace('.', '/')}.py line {graph[a][b]})"


def test_the_graph_sees_every_kind_of_import() -> None:
    graph = import_graph()
    assert "captioning.checkpoints.load" in graph["captioning.checkpoints.export"]  # top-level from-import
    assert "captioning.zoo" in graph["captioning.cli.runtime"]  # a function-local import
    assert "captioning.decoding.search" in graph["captioning.decoding"]  # package __init__
    assert len(graph) > 50


def test_no_import_cycles() -> None:
    graph = import_graph()
    found = []
    for component in _cycles(graph):
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
            if (_within(module, "captioning.cli") or module == "captioning.api") and entry != "captioning.cli":
                continue  # `captioning train` / `captioning bench` / `captioning.train()` run the others
            bad.append(_edge(graph, module, target))
    assert not bad, "imports of an entry point (cli, training.train, benchmarks):\n  " + "\n  ".join(bad)


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
