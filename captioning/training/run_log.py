"""``<run>/train.log`` holds what the run printed, as a cluster user reads it after the job.

Hydra's job logging opens that file for the root logger, but nothing reached it: the project reports by
``print`` (progress lines, the best checkpoint, one-line errors), and Lightning's loggers do not propagate
to the root (at import they found it without handlers, so they added their own console handler and
stopped propagating). The file stayed empty. While a run is in progress this copies its console into the
file: standard output and error, and the console handlers of loggers whose records never reach the root.
A progress bar's carriage-return redraws stay on the console (the bar is on only at a terminal).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


class _Copy:
    """A text stream that writes to ``stream`` and, but for redraws, to ``file``; anything else (isatty,
    encoding, fileno) is the stream's, so a caller sees the console it replaced."""

    def __init__(self, stream: IO[str], file: IO[str]) -> None:
        self._stream, self._file = stream, file

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        if "\r" not in text:  # a bar's redraw: thousands of lines in a file, one line on a terminal
            self._file.write(text)
            self._file.flush()
        return written

    def flush(self) -> None:
        self._stream.flush()
        self._file.flush()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def job_log_file() -> Path | None:
    """The file Hydra's job logging writes for this run (``<run>/<job name>.log``); None where job logging
    writes no file (``hydra/job_logging=none`` or ``disabled``, or outside Hydra)."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            return Path(handler.baseFilename)
    return None


def _console_handlers_off_the_root() -> list[logging.StreamHandler]:
    """Console handlers of loggers whose records do not reach the root's file (Lightning's)."""
    found = []
    for logger in logging.Logger.manager.loggerDict.values():
        if isinstance(logger, logging.Logger) and not logger.propagate:
            found += [
                h
                for h in logger.handlers
                if type(h) is logging.StreamHandler and h.stream in (sys.stdout, sys.stderr)
            ]
    return found


@contextmanager
def console_copied_to_run_log(enabled: bool = True) -> Iterator[Path | None]:
    """Within the block, the console is also appended to the run's log file (yielded; None: no file, or
    ``enabled`` false, as on every process but the job's first, which would repeat its lines)."""
    path = job_log_file() if enabled else None
    if path is None:
        yield None
        return
    with path.open("a", encoding="utf-8") as file:
        out, err = _Copy(sys.stdout, file), _Copy(sys.stderr, file)
        handlers = [(h, h.stream) for h in _console_handlers_off_the_root()]
        for handler, stream in handlers:
            handler.setStream(out if stream is sys.stdout else err)
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = out, err
        try:
            yield path
        finally:
            sys.stdout, sys.stderr = saved
            for handler, stream in handlers:
                handler.setStream(stream)
