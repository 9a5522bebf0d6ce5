"""Signals handed to a thread of their own, so a handler never waits on a lock.

A Python signal handler runs in the main thread between two bytecodes, possibly while that
thread holds a lock the handler then needs. ``threading.Event`` is the usual victim:
``Event.wait`` holds its condition's plain (non-reentrant) lock for a few bytecodes before it
blocks and after it wakes, so a handler calling ``Event.set`` at that moment waits for the
thread it interrupted, and the process never ends: a SIGTERM that lands as the main thread
begins to wait for shutdown hangs it until the kubelet's SIGKILL.

``relay_signals`` installs handlers that only write the signal's number to a pipe
(``os.write`` takes no Python lock); a daemon thread reads the pipe and calls the callback,
where taking locks is safe.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterable
from types import FrameType

DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def relay_signals(
    callback: Callable[[int], None], signums: Iterable[int] = DEFAULT_SIGNALS
) -> None:
    """Call ``callback(signum)`` from a daemon thread for each of ``signums`` received.

    Must be called from the main thread (Python's rule for ``signal.signal``). Each signal
    is delivered once, in order; a callback that raises ends the relay (none should).
    """
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)  # a flood of signals drops bytes, never blocks the handler

    def handle(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(BlockingIOError):
            os.write(write_fd, bytes([signum]))

    def relay() -> None:
        while data := os.read(read_fd, 64):
            for signum in data:
                callback(signum)

    threading.Thread(target=relay, name="signals", daemon=True).start()
    for signum in signums:
        signal.signal(signum, handle)
