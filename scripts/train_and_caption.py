"""Command line of ``experiments/train_and_caption.py`` (usage in its docstring; also ``python -m experiments.train_and_caption``)."""

from experiments.train_and_caption import main

raise SystemExit(main())
