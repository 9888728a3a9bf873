"""Command line of ``experiments/gen_zoo_pages.py`` (usage in its docstring; also ``python -m experiments.gen_zoo_pages``)."""

from experiments.gen_zoo_pages import main

raise SystemExit(main())
