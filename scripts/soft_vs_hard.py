"""Command line of ``experiments/soft_vs_hard.py`` (usage in its docstring; also ``python -m experiments.soft_vs_hard``)."""

from experiments.soft_vs_hard import main

raise SystemExit(main())
