"""Command line of ``experiments/domain_notice_captions.py`` (usage in its docstring; also ``python -m experiments.domain_notice_captions``)."""

from experiments.domain_notice_captions import main

raise SystemExit(main())
