"""Command line of ``experiments/bench_decode.py`` (usage in its docstring; also ``python -m experiments.bench_decode``)."""

from experiments.bench_decode import main

raise SystemExit(main())
