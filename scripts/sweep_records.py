"""Command line of ``experiments/sweep_records.py`` (usage in its docstring; also ``python -m experiments.sweep_records``)."""

from experiments.sweep_records import main

raise SystemExit(main())
