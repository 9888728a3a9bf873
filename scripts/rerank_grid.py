"""Command line of ``experiments/rerank_grid.py`` (usage in its docstring; also ``python -m experiments.rerank_grid``)."""

from experiments.rerank_grid import main

raise SystemExit(main())
