"""Command line of ``experiments/scst_sweep.py`` (usage in its docstring; also ``python -m experiments.scst_sweep``)."""

from experiments.scst_sweep import main

raise SystemExit(main())
