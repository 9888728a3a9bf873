"""Command line of ``experiments/scst_diagnostics.py`` (usage in its docstring; also ``python -m experiments.scst_diagnostics``)."""

from experiments.scst_diagnostics import main

raise SystemExit(main())
