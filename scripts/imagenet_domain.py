"""Command line of ``experiments/imagenet_domain.py`` (usage in its docstring; also ``python -m experiments.imagenet_domain``)."""

from experiments.imagenet_domain import main

raise SystemExit(main())
