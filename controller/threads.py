"""Threads joined by a deadline on a `Clock`, not by `Thread.join(timeout)` in real time.

A `ThreadGroup` starts daemon threads and counts the ones still running under a
condition that each thread notifies as it returns; `join_until(deadline)` waits on that
condition with `clock.wait_until`, so a `FakeClock` decides when a join gives up, and a
test steps it instead of sleeping.

Guarantees: `join_until` returns True only once every thread started so far has returned
(the threads are then no longer alive); it returns False at `deadline` without stopping
any. `alive()` is True while no started thread has returned: a thread counts as running
from just before it starts, so a probe never sees one that is starting as dead. A thread
counts as returned even when its target raised; an exception that ends a thread is logged
(structlog, with the thread's name), and `alive()` is False from then on.
A target that must not end so keeps its own loop alive (`controller.failures`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog

from controller.clock import Clock

log = structlog.get_logger(__name__)


class ThreadGroup:
    """Daemon threads started together and joined by a deadline of `clock`."""

    def __init__(self, clock: Clock) -> None:
        """No thread yet; deadlines passed to `join` are on `clock`."""
        self._clock = clock
        self._cond = threading.Condition()
        # Guarded by _cond: how many threads were started, how many of them have not
        # returned yet (a thread counts from just before it starts), and the threads.
        self._started = 0
        self._running = 0
        self._threads: list[threading.Thread] = []

    def start(self, target: Callable[[], object], name: str) -> threading.Thread:
        """Run `target` in a new daemon thread named `name`; returns that thread."""
        thread = threading.Thread(target=self._run, args=(target, name), name=name, daemon=True)
        with self._cond:
            self._started += 1
            self._running += 1
        try:
            thread.start()
        except BaseException:
            with self._cond:
                self._started -= 1
                self._running -= 1
            raise
        with self._cond:
            self._threads.append(thread)
        return thread

    def started(self) -> int:
        """Return how many threads were started (counted from just before each starts)."""
        with self._cond:
            return self._started

    def alive(self) -> bool:
        """True while every started thread runs (also when none was started)."""
        with self._cond:
            return self._running == self._started

    def join_until(self, deadline: float | None) -> bool:
        """Wait until every started thread returned or `now() >= deadline`; True if all did."""
        with self._cond:
            while self._running and (deadline is None or self._clock.now() < deadline):
                self._clock.wait_until(self._cond, deadline)
            if self._running:
                return False
            threads = list(self._threads)
        for thread in threads:
            thread.join()  # each is past its last statement: this only reaps it
        return True

    def _run(self, target: Callable[[], object], name: str) -> None:
        try:
            target()
        except Exception:
            log.exception("A thread ended by an exception", thread=name)
        finally:
            with self._cond:
                self._running -= 1
                self._cond.notify_all()
