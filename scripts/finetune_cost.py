"""Command line of ``experiments/finetune_cost.py`` (usage in its docstring; also ``python -m experiments.finetune_cost``)."""

from experiments.finetune_cost import main

raise SystemExit(main())
