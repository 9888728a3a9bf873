"""Command line of ``experiments/demo_screenshot.py`` (usage in its docstring; also ``python -m experiments.demo_screenshot``)."""

from experiments.demo_screenshot import main

raise SystemExit(main())
