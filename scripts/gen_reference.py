"""Command line of ``experiments/gen_reference.py`` (usage in its docstring; also ``python -m experiments.gen_reference``)."""

from experiments.gen_reference import main

raise SystemExit(main())
