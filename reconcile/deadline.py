"""A run's own stop event: set when the operator stops or when the run's deadline passes.

The runner watches one ``threading.Event`` and interrupts the CLI the way Ctrl-C does when
it is set. ``RunStop`` gives each run an event of its own that follows the operator's stop
event and also fires ``timeout`` seconds after the run began, so a program that never ends
cannot hold a worker forever; ``timed_out`` then tells the two causes apart. The deadline
is measured on a ``controller.clock.Clock`` (``now()``), so tests can move it. The event is
a ``StopSignal``: its ``cause`` tells a runner whose runs outlive the operator whether to
leave the run going (``shutdown``) or to stop it (``deadline``).
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Self

from controller.clock import Clock, RealClock
from workspace.runner import StopSignal

POLL_SECONDS = 0.2  # how often the watcher looks at the operator's stop event


class RunStop:
    """Use as a context manager around one run; see the module docstring."""

    def __init__(
        self,
        stop: threading.Event,
        timeout: float,
        *,
        clock: Clock | None = None,
        poll: float = POLL_SECONDS,
        interrupt: threading.Event | None = None,
    ) -> None:
        """Follow ``stop``; fire ``timeout`` seconds (of ``clock``) after ``__enter__`` too.

        ``interrupt`` (the Stack is being deleted) fires it too, with cause ``interrupt``
        and ``interrupted`` set. ``poll`` is how often, in real seconds, the watcher looks.
        """
        self.event = StopSignal()
        self.timed_out = False
        self.interrupted = False
        self._interrupt = interrupt or threading.Event()
        self._stop, self._timeout = stop, timeout
        self._clock, self._poll = clock or RealClock(), poll
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="run-deadline", daemon=True)

    def __enter__(self) -> Self:
        """Start watching."""
        self._deadline = self._clock.now() + self._timeout
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stop watching (the run is over)."""
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._done.wait(self._poll):
            if self._stop.is_set():
                self.event.set_for("shutdown")
                return
            if self._interrupt.is_set():
                self.interrupted = True
                self.event.set_for("interrupt")
                return
            if self._clock.now() >= self._deadline:
                self.timed_out = True
                self.event.set_for("deadline")
                return
