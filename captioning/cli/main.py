"""``captioning`` command: sub-commands caption, evaluate, score, export, demo, plot, tune, bank, models.

Only argparse and the sub-command modules (which import nothing heavy at module level) load before a
command runs, so ``captioning --help`` answers at once; torch, Lightning and Hydra load in ``run``."""

from __future__ import annotations

import argparse
import os
import sys

from captioning.runtime import configure_process

configure_process()  # before torch is imported (OMP_WAIT_POLICY); WANDB_MODE offline unless set

from captioning.cli import bank, caption, demo, evaluate, export, models, plot, score, tune  # noqa: E402

SUBCOMMANDS = {
    "caption": caption,
    "evaluate": evaluate,
    "score": score,
    "export": export,
    "demo": demo,
    "plot": plot,
    "tune": tune,
    "bank": bank,
    "models": models,
}


def version() -> str:
    """The installed distribution's version (its metadata), else the source tree's ``__version__``."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed_version

    try:
        return installed_version("captioning")
    except PackageNotFoundError:  # run from a source tree that was never installed
        from captioning import __version__

        return __version__


QUIET_HELP = "no progress bars or progress lines on stderr (captioning/progress.py)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="captioning", description=__doc__)
    parser.add_argument("--version", action="version", version=f"captioning {version()}")
    parser.add_argument("--quiet", action="store_true", help=QUIET_HELP)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS.values():
        module.add_parser(subparsers)
    unique = {id(sub): sub for sub in subparsers.choices.values()}  # an alias maps to its command's parser
    for sub in unique.values():  # also after the sub-command: captioning evaluate --quiet ...
        sub.add_argument("--quiet", action="store_true", default=argparse.SUPPRESS, help=QUIET_HELP)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from captioning import progress

    progress.set_quiet(args.quiet)  # set on every call: tests run several commands in one process
    from captioning.cli.paths import problems

    check = getattr(SUBCOMMANDS[args.command], "check_args", None)  # the arguments together, no heavy import
    problem = check(args) if check is not None else None
    refused = [problem] if problem else problems(args)  # a misspelt file: one line at once, before torch
    for line in refused:
        print(f"captioning {args.command}: error: {line}", file=sys.stderr)
    if refused:
        return 2
    try:
        return SUBCOMMANDS[args.command].run(args)
    except KeyboardInterrupt:  # Ctrl-C: one line, the shell's status for SIGINT, no traceback
        print(f"captioning {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of stdout left (`| head`): stop quietly, as cat does
        os.dup2(
            os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno()
        )  # Python's exit flush would raise again
        return 141  # 128 + SIGPIPE
    except Exception as err:  # a user's mistake a command did not report itself: one line; a bug keeps
        from captioning.errors import is_user_error, one_line  # its traceback

        if not is_user_error(err):
            raise
        print(f"captioning {args.command}: error: {one_line(err)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
