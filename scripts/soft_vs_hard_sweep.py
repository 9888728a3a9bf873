"""Command line of ``experiments/soft_vs_hard_sweep.py`` (usage in its docstring; also ``python -m experiments.soft_vs_hard_sweep``)."""

from experiments.soft_vs_hard_sweep import main

raise SystemExit(main())
