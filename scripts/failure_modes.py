"""Command line of ``experiments/failure_modes.py`` (usage in its docstring; also ``python -m experiments.failure_modes``)."""

from experiments.failure_modes import main

raise SystemExit(main())
