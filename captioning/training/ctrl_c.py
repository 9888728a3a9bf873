"""Ctrl-C during training stops the run the way SIGTERM does: at the end of its step, with ``last.ckpt``.

Lightning answers a KeyboardInterrupt with "attempting graceful shutdown" and exit status 1, having saved
nothing: the steps since the last periodic save (up to ``callbacks.last_checkpoint.every_n_minutes``) were
lost, and nothing said what was kept. A KeyboardInterrupt can land anywhere, between two parameter updates
of one optimizer step too, so it is not the moment to save. Here the first Ctrl-C only marks the stop where
Lightning and ``PeriodicCheckpoint`` look for a SIGTERM: the step ends, ``last.ckpt`` is written, every DDP
process stops at the same step, and ``captioning-train`` says where it stopped and exits 130 (a shell's
status for SIGINT). A second Ctrl-C stops at once, as before, unsaved.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytorch_lightning as pl

MESSAGE = (
    "Ctrl-C: the run stops at the end of this step with a last.ckpt to resume from (Ctrl-C again: at once)"
)


@contextmanager
def ctrl_c_stops(trainer: pl.Trainer) -> Iterator[list[bool]]:
    """While in the block, the first SIGINT marks ``trainer``'s stop (the list yielded gets ``True``); the
    second raises KeyboardInterrupt. Outside the main thread (signals cannot be handled there) it does
    nothing."""
    pressed: list[bool] = []
    if threading.current_thread() is not threading.main_thread():
        yield pressed
        return
    previous = signal.getsignal(signal.SIGINT)

    def on_sigint(signum: int, frame: object) -> None:
        if pressed:  # the second: Lightning's own KeyboardInterrupt path
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        pressed.append(True)
        # SIGTERM's own notifier: one process marks the stop where Lightning looks; with several, the note
        # PeriodicCheckpoint reduces over them at a batch's end, so that all stop at the same step
        trainer._signal_connector._sigterm_notifier_fn(signal.SIGTERM, frame)
        print(MESSAGE, file=sys.stderr, flush=True)

    signal.signal(signal.SIGINT, on_sigint)
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, previous)
