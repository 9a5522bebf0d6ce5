"""Signals handed to a thread of their own, so a handler never waits on a lock.

A Python signal handler runs in the main thread between two bytecodes, possibly while that
thread holds a lock the handler then needs. ``threading.Event`` is the usual victim:
``Event.wait`` holds its condition's plain (non-reentrant) lock for a few bytecodes before it
blocks and after it wakes, so a handler calling ``Event.set`` at that moment waits for the
thread it interrupted, and the process never ends: a SIGTERM that lands as the main thread
begins to wait for shutdown hangs it until the kubelet's SIGKILL.

And a handler may never run at all: Python runs it in the main thread when that thread
next executes bytecode, and the kernel may deliver a process's signal to any of its
threads. A main thread blocked on a lock (``Event.wait`` without a timeout, as the operator
waits for shutdown) is then not woken, and the SIGTERM is lost until a second one lands on
the main thread (seen in the test suite: an operator that ignored SIGTERM for minutes).

``relay_signals`` therefore makes a pipe CPython's wakeup fd: its C-level handler writes
the signal's number to it at once, in whichever thread took the signal. A daemon thread
reads the pipe and calls the callback, where taking locks is safe. The Python-level
handlers do nothing; they only keep the default action (ending the process) away.
"""

from __future__ import annotations

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

    Must be called from the main thread (Python's rule for ``signal.signal`` and
    ``signal.set_wakeup_fd``), once per process: it takes the process's wakeup fd. Each
    signal is delivered once, in order; other signals with a Python handler also reach the
    wakeup fd and are not relayed. A callback that raises ends the relay (none should).
    """
    wanted = frozenset(signums)
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)  # a flood of signals drops bytes, never blocks a handler

    def relay() -> None:
        while data := os.read(read_fd, 64):
            for signum in data:
                if signum in wanted:
                    callback(signum)

    threading.Thread(target=relay, name="signals", daemon=True).start()
    for signum in wanted:
        signal.signal(signum, _relayed)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)


def _relayed(_signum: int, _frame: FrameType | None) -> None:
    """The Python-level handler: nothing, the wakeup fd already carried the signal."""
