"""Command line of ``experiments/compare.py`` (usage in its docstring; also ``python -m experiments.compare``)."""

from experiments.compare import main

raise SystemExit(main())
