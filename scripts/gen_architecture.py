"""Command line of ``experiments/gen_architecture.py`` (usage in its docstring; also ``python -m experiments.gen_architecture``)."""

from experiments.gen_architecture import main

raise SystemExit(main())
