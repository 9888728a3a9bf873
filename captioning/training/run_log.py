"""``<run>/train.log`` holds what the run printed, as a cluster user reads it after the job.

Hydra's job logging opens that file for the root logger, but nothing reached it: the project reports by
``print`` (progress lines, the best checkpoint, one-line errors), and Lightning's loggers do not propagate
to the root (at import they found it without handlers, so they added their own console handler and
stopped propagating). The file stayed empty. While a run is in progress this copies its console into the
file: standard output and error, and the console handlers of loggers whose records never reach the root.
The file gets lines as a terminal would leave them: a progress bar (on only at a terminal) as its final
state, not its thousands of redraws, and no colour codes; a crash's traceback too.
"""

from __future__ import annotations

import logging
import re
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

# What a terminal does with a console's text, as far as a log of lines needs it: line ends, carriage
# returns, erasing the line (ESC[2K), moving up a line (ESC[nA, rich's redraw of a bar over several lines),
# and other escapes (colours), which change nothing in the text.
TERMINAL = re.compile(r"(\r\n|\n)|(\r)|(\x1b\[2K)|\x1b\[(\d*)A|\x1b\[[0-?]*[ -/]*[@-~]")


class _Copy:
    """A text stream that writes to the console ``stream`` and, while ``file`` is set, the same text as a
    terminal leaves it, line by line: a line redrawn after a carriage return is written as last drawn, a
    progress bar over several lines (redrawn by moving up) as its final frame, colour codes removed.
    Lines are written as they end, except the lines a bar redraws, held until they are final (in a piped
    run there are none). Anything else (isatty, encoding, fileno) is the console's.

    One per process and stream, kept between runs (``file`` None in between): what wraps sys.stdout
    (W&B's console capture) wraps it once, and keeps capturing in a sweep's later jobs."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self.file: IO[str] | None = None
        self._line = ""  # the line being drawn
        self._held: list[str] = []  # ended lines a redraw may still move up into
        self._redrawn = 0  # the most lines one write moved up: the height of a bar drawn over lines
        self._returned = False  # a carriage return ended the text so far: what comes next draws over it

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        if self.file is not None:
            self._draw(text)
            while len(self._held) > self._redrawn:
                self._emit(self._held.pop(0))
            self.file.flush()  # a SIGTERM's os._exit, a killed job: what was printed is in the file
        return written

    def _draw(self, text: str) -> None:
        up_in_this_write, at = 0, 0
        for match in TERMINAL.finditer(text):
            self._put(text[at : match.start()])
            at = match.end()
            newline, carriage_return, erase, up = match.groups()
            if newline:  # the line stands as drawn ("line\r" then "\n" too)
                self._held.append(self._line)
                self._line, self._returned = "", False
            elif carriage_return:
                self._returned = True
            elif erase:
                self._line = ""
            elif up is not None:  # the cursor moves up into lines already ended: they are drawn again
                n = int(up or 1)
                del self._held[max(len(self._held) - n, 0) :]
                self._line, self._returned = "", False
                up_in_this_write += n
        self._put(text[at:])
        self._redrawn = max(self._redrawn, up_in_this_write)

    def _put(self, text: str) -> None:
        if text:
            self._line = text if self._returned else self._line + text  # drawn over from the line's start
            self._returned = False

    def end_file(self) -> None:
        """Write the held lines and an unfinished last line (a bar's final state), then stop copying."""
        if self.file is not None:
            for line in [*self._held, *([self._line] if self._line.strip() else [])]:
                self._emit(line)
            self.file.flush()
        self.file, self._line, self._held, self._redrawn, self._returned = None, "", [], 0, False

    def _emit(self, line: str) -> None:
        self.file.write(line.rstrip() + "\n")  # without the padding rich draws lines with

    def flush(self) -> None:
        self._stream.flush()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _copy_of(name: str) -> _Copy:
    """The process's copy of ``sys.<name>``, installed the first time (again where the console under it was
    replaced since, as pytest's capture does per test)."""
    stream = getattr(sys, name)
    if not isinstance(stream, _Copy):
        stream = _Copy(stream)
        setattr(sys, name, stream)
    return stream


def job_log_file() -> Path | None:
    """The file Hydra's job logging writes for this run (``<run>/<job name>.log``); None where job logging
    writes no file (``hydra/job_logging=none`` or ``disabled``, or outside Hydra)."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            return Path(handler.baseFilename)
    return None


def _stream_handlers_off_the_root() -> list[logging.StreamHandler]:
    """The stream handlers (not files) of loggers whose records do not reach the root's file (Lightning's)."""
    found = []
    for logger in logging.Logger.manager.loggerDict.values():
        if isinstance(logger, logging.Logger) and not logger.propagate:
            found += [
                h
                for h in logger.handlers
                if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
            ]
    return found


@contextmanager
def console_copied_to_run_log(enabled: bool = True) -> Iterator[Path | None]:
    """Within the block, the console is also appended to the run's log file (yielded; None: no file, or
    ``enabled`` false, as on every process but the job's first, which would repeat its lines). An exception
    leaving the block is written to the file with its traceback (Hydra prints it to the console after the
    run has returned)."""
    path = job_log_file() if enabled else None
    if path is None:
        yield None
        return
    again = path.is_file() and path.stat().st_size > 0  # a resume, or a start refused in a run's folder
    # backslashreplace, as the console's stderr: a path that is not UTF-8 must not fail the run's report
    with path.open("a", encoding="utf-8", errors="backslashreplace") as file:
        if again:
            now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
            file.write(f"--- {now}: captioning-train started again in this folder ---\n")
        out, err = _copy_of("stdout"), _copy_of("stderr")
        # a handler made before the copies (Lightning's, at import) holds the consoles themselves
        consoles = {id(out._stream): out, id(err._stream): err}
        handlers = [(h, h.stream) for h in _stream_handlers_off_the_root() if id(h.stream) in consoles]
        for handler, stream in handlers:
            handler.setStream(consoles[id(stream)])
        out.file = err.file = file
        try:
            yield path
        except Exception:
            out.end_file()  # what the console shows above the traceback comes first
            err.end_file()
            file.write(traceback.format_exc())
            raise
        finally:
            out.end_file()
            err.end_file()
            for handler, stream in handlers:
                handler.setStream(stream)
