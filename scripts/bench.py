"""Command line of ``experiments/bench.py`` (usage in its docstring; also ``python -m experiments.bench``)."""

from experiments.bench import main

raise SystemExit(main())
