"""Command line of ``experiments/attention_atlas.py`` (usage in its docstring; also ``python -m experiments.attention_atlas``)."""

from experiments.attention_atlas import main

raise SystemExit(main())
