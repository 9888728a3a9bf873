"""Command line of ``experiments/ablate_words.py`` (usage in its docstring; also ``python -m experiments.ablate_words``)."""

from experiments.ablate_words import main

raise SystemExit(main())
