"""Command line of ``experiments/estimator_variance.py`` (usage in its docstring; also ``python -m experiments.estimator_variance``)."""

from experiments.estimator_variance import main

raise SystemExit(main())
