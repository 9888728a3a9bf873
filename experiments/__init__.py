"""The project's experiments, benchmarks and documentation tools: a package of their own, outside the
``captioning`` wheel.

Each module with a ``main`` is a command line (``python -m experiments.<name>``, or the thin launcher
``python scripts/<name>.py`` that the docs quote); the others are the parts they share (``sweep_jobs``,
``step_chain``, ``compare_pages``, ``soft_vs_hard_pages``) and the benchmark harness (``benchmarks/``).
They import ``captioning``; ``captioning`` never imports them (tests/package/test_import_graph.py).

Installed, editable, by ``make setup`` (``pip install -e ./experiments``, its own ``pyproject.toml``), never
by ``pip install captioning``.
"""
