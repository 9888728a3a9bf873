"""Command line of ``experiments/execute_notebooks.py`` (usage in its docstring; also ``python -m experiments.execute_notebooks``)."""

import sys

from experiments.execute_notebooks import main

raise SystemExit(main(sys.argv[1:]))
