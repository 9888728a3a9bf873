"""An entry point's command line checked as Hydra will compose it, before Hydra runs anything.

``captioning-train --config-dir mine -m seed=0,1 ...``: the user's YAML within its bounds
(:mod:`captioning.config_yaml`), every ``_target_`` of the composed config and of each sweep job on the
allow-list (:mod:`captioning.config_safety`), each job through the entry point's own check: one line naming
the first problem, or None.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from captioning.config_safety import check_targets
from captioning.config_yaml import check_yaml_files, searchpath_overrides
from captioning.errors import ConfigError

MAX_SWEEP_JOBS_CHECKED = 256  # a sweep's jobs are each composed and checked before the first starts


def _sweep_jobs(overrides: list[str]) -> list[list[str]]:
    """The overrides of every job of a ``-m`` sweep, as Hydra's basic sweeper will split them."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def command_line_problem(
    argv: list[str],
    config_dir: str,
    config_name: str,
    check_job: Any = None,
    program: str = "captioning-train",
) -> str | None:
    """A Hydra entry point's command line (``captioning-train --config-dir mine -m seed=0,1 ...``) checked
    as Hydra will compose it, before Hydra runs anything (its launcher and ``hydra.callbacks`` included):
    one line for user YAML beyond the bounds or a target not allowed, else None. A sweep's every job is
    composed and checked too, also by ``check_job(cfg)`` (the entry point's own config check), so that one
    invalid job is named before any job starts (a job failing at start-up would stop the whole sweep).
    ``program`` names the entry point in the hint that lists the keys (``captioning-train --cfg job``)."""
    import os

    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_automatic_config_search_path, get_args_parser
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    from captioning.errors import is_user_error, one_line

    try:
        args = get_args_parser().parse_args(argv)
    except SystemExit:  # a flag Hydra refuses: its own message, when it parses the line again
        return None
    from captioning.compose import unreadable_override

    unreadable = unreadable_override(args.overrides)
    if unreadable:
        return unreadable
    folders = [Path(args.config_dir)] if args.config_dir else []
    try:
        check_yaml_files([*folders, *searchpath_overrides(args.overrides)])
    except ConfigError as err:
        return str(err)
    if args.help or args.hydra_help or args.info or args.shell_completion:
        return None  # nothing is built
    search_path = create_automatic_config_search_path(None, None, args.config_path or config_dir)
    if args.config_dir:
        search_path.prepend(
            provider="command-line",
            path=f"file://{os.path.abspath(args.config_dir)}",
            anchor=SearchPathQuery(provider="schema"),
        )
    name = args.config_name or config_name
    flags = f" --config-dir {args.config_dir}" if args.config_dir else ""
    flags += f" --config-name {args.config_name}" if args.config_name else ""
    try:
        hydra = Hydra.create_main_hydra2(task_name="check", config_search_path=search_path)

        def compose_job(job: list[str]) -> DictConfig:  # one job, as Hydra will compose it
            return hydra.compose_config(name, job, run_mode=RunMode.RUN, with_log_configuration=False)

        def nearest_key(err: Exception, job: list[str]) -> str | None:  # in the user's configs too
            return _nearest_key(name, err, job, compose_job, f"`{program}{flags} --cfg job`")

        try:
            cfg = hydra.compose_config(
                name,
                args.overrides,
                run_mode=RunMode.MULTIRUN if args.multirun else RunMode.RUN,
                with_log_configuration=False,
            )
        except Exception as err:  # noqa: BLE001 - a user's config mistake is one line; a bug is re-raised
            if isinstance(err, ConfigError | RecursionError) or not is_user_error(err):
                raise
            job = _sweep_jobs(args.overrides)[0] if args.multirun else args.overrides
            # without flags the entry point composes again and words its own report
            return nearest_key(err, job) or (one_line(err) if any(a.startswith("-") for a in argv) else None)
        check_targets(cfg)
        if not args.multirun:
            return None
        jobs = _sweep_jobs(args.overrides)
        for number, job in enumerate(jobs[:MAX_SWEEP_JOBS_CHECKED]):
            try:
                job_cfg = compose_job(job)
                check_targets(job_cfg)
                if check_job is not None:
                    check_job(job_cfg)
            except Exception as err:  # noqa: BLE001 - a user's mistake names its job; a bug re-raised
                if not is_user_error(err):
                    raise
                swept = " ".join(a for a in job if a not in args.overrides)
                which = f"sweep job {number} of {len(jobs)} ({swept})"
                return f"{which}: {nearest_key(err, job) or one_line(err)}; no job was started"
        return None
    except ConfigError as err:
        return str(err)
    except RecursionError:
        return f"config {name!r}: its defaults lists include each other (a cycle), so it never finishes composing"
    finally:
        GlobalHydra.instance().clear()


def _nearest_key(
    config_name: str,
    err: Exception,
    overrides: list[str],
    compose_job: Callable[[list[str]], DictConfig],
    where: str,
) -> str | None:
    """For an unknown key, the line naming the nearest one (did you mean ...?); else None."""
    from omegaconf import open_dict

    from captioning.compose import unknown_key_message

    def keys_of(job: list[str]) -> DictConfig:  # the config's keys, not Hydra's own node
        cfg = compose_job(job)
        with open_dict(cfg):
            cfg.pop("hydra", None)
        return cfg

    try:
        return unknown_key_message(config_name, err, overrides, keys_of, where)
    except Exception:  # noqa: BLE001 - Hydra's own words then
        return None
