"""Command line of ``experiments/scene_accuracy.py`` (usage in its docstring; also ``python -m experiments.scene_accuracy``)."""

from experiments.scene_accuracy import main

raise SystemExit(main())
