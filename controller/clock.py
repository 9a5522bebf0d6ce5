"""Time source for the controller: a monotonic clock that waiting code blocks on.

Every time `controller` reads (monotonic or wall clock) and every timed wait it makes (a
backoff, a retry period, a deadline to join threads by: `controller.threads`) goes through
a `Clock` (client-go injects `clock.Clock` the same way, "for testing purposes"). This
module is the only one in `controller` that touches `time` or `datetime.now`;
`tests/controller/test_one_clock.py` keeps it so. Each component takes its clock as a
parameter (a `RealClock()` when left out, except where it is required); the `Manager`
hands its own to every part it builds and to reconcilers (`ManagerContext.clock`). Built
outside a manager, `retry.REACHABILITY` and `retry.with_retries` use a `RealClock` of
their own, and so does `logs.configure_logging` unless given one. Two implementations
live here:

- `RealClock`: `time.monotonic()`, the wall clock in UTC, `threading.Condition.wait` and
  `threading.Event.wait` with the time left as their timeout.
- `FakeClock`: time moves only when a test calls `step()` or `set_time()`, and doing so
  wakes every thread blocked in `wait_until()` or `wait_event()`, so unit tests never
  sleep for real. Its wall clock is a fixed instant plus the same offset, so both move
  together.

`wall()` is the time written into objects (metav1.Time) and log lines; `now()` is for
intervals and deadlines. `parse_time` reads a metav1.Time back.

Not on the clock: time kept by others on our behalf — the API server's watch timeout and
the client's socket timeouts, the metrics server's idle-connection timeout, the mtimes of
certificate files, and the timestamps tenacity keeps for its statistics (the retry budget
itself is measured on the clock).

Guarantees: `now()` never goes backwards on either clock. `wait_until()` behaves like
`Condition.wait()`: it may return early (on `notify()`, on a fake step, or spuriously),
so callers re-check their own predicate and the time in a loop. `wait_event()` behaves
like `Event.wait()` with a deadline. Callers own the condition (or event) and its lock;
the clock never holds one of its own locks while a waiter sleeps.
"""

from __future__ import annotations

import datetime
import itertools
import threading
import time
from typing import Protocol

# How long FakeClock.wait_for_waiters() waits, in real seconds, unless told otherwise. It
# only bounds a test that is about to fail; passing tests return as soon as a waiter blocks.
DEFAULT_WAITER_TIMEOUT = 5.0
# Where a FakeClock's wall clock stands at fake time 0 (any fixed UTC instant will do).
FAKE_EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
# How often, in real seconds, a FakeClock waiter in wait_event() looks at its event: a step
# wakes it at once, but a threading.Event cannot be subscribed to.
FAKE_EVENT_POLL = 0.005


def parse_time(value: object) -> datetime.datetime | None:
    """A metav1.Time (RFC 3339) read from an object, or None when absent or malformed."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value)  # 3.11 reads the "Z" suffix
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=datetime.UTC)


class Clock(Protocol):
    """A monotonic clock in seconds, a wall clock, and waits on a condition or an event."""

    def now(self) -> float:
        """Return the current monotonic time in seconds (arbitrary origin)."""
        ...

    def wall(self) -> datetime.datetime:
        """Return the current wall-clock time, timezone-aware, in UTC."""
        ...

    def wait_until(self, cond: threading.Condition, deadline: float | None) -> None:
        """Block on `cond` until it is notified or `now() >= deadline`.

        The caller must hold `cond`'s lock, exactly as for `Condition.wait()`; it is
        released while waiting and held again on return. `deadline=None` waits for a
        notification only. The wait may end early or spuriously: callers loop, re-checking
        their predicate and `now()`.
        """
        ...

    def wait_event(self, event: threading.Event, deadline: float | None) -> bool:
        """Block until `event` is set or `now() >= deadline`; return `event.is_set()`.

        `Event.wait(timeout)` with the timeout on this clock: `deadline=None` waits for
        the event only. The caller holds no lock the setter needs.
        """
        ...


class RealClock:
    """The process's monotonic clock (`time.monotonic`)."""

    def now(self) -> float:
        """Return `time.monotonic()`."""
        return time.monotonic()

    def wall(self) -> datetime.datetime:
        """Return `datetime.now(UTC)`."""
        return datetime.datetime.now(datetime.UTC)

    def wait_until(self, cond: threading.Condition, deadline: float | None) -> None:
        """Wait on `cond` for at most the time left until `deadline` (see `Clock`)."""
        if deadline is None:
            cond.wait()
            return
        remaining = deadline - self.now()
        if remaining > 0:
            cond.wait(timeout=remaining)

    def wait_event(self, event: threading.Event, deadline: float | None) -> bool:
        """`event.wait()` for at most the time left until `deadline` (see `Clock`)."""
        if deadline is None:
            return event.wait()
        return event.wait(timeout=max(0.0, deadline - self.now()))


class FakeClock:
    """A clock for tests: time stands still until `step()` or `set_time()` moves it.

    Moving the time wakes every thread blocked in `wait_until()` or `wait_event()` (each
    re-checks its own deadline and goes back to sleep if it has not passed). A waiter is
    counted by `waiters()` from the moment it blocks until it is woken; a wake-up by
    `step()` removes it at once, so after a step `wait_for_waiters(n)` returns only once
    `n` threads have looked at the new time and blocked again. That is how tests know a
    background loop has finished reacting to a step, without sleeping. A waiter in
    `wait_event()` notices its event being set within `FAKE_EVENT_POLL` real seconds,
    without leaving `waiters()`.
    """

    def __init__(self, start: float = 0.0) -> None:
        """Start the clock at `start` seconds."""
        self._lock = threading.Condition()
        # Guarded by _lock. _now only grows. _waiting maps a token per blocked
        # wait_until() or wait_event() call to the condition that call sleeps on.
        self._now = start
        self._waiting: dict[int, threading.Condition] = {}
        self._tokens = itertools.count()

    def now(self) -> float:
        """Return the fake time in seconds."""
        with self._lock:
            return self._now

    def wall(self) -> datetime.datetime:
        """Return `FAKE_EPOCH` plus the fake time: it moves with `step()` and nothing else."""
        return FAKE_EPOCH + datetime.timedelta(seconds=self.now())

    def wait_until(self, cond: threading.Condition, deadline: float | None) -> None:
        """Wait on `cond` until notified or until a step reaches `deadline` (see `Clock`)."""
        token = self._register(cond, deadline)
        if token is None:
            return
        try:
            cond.wait()
        finally:
            self._unregister(token)

    def wait_event(self, event: threading.Event, deadline: float | None) -> bool:
        """Wait until `event` is set or a step reaches `deadline` (see `Clock`)."""
        wake = threading.Condition()
        with wake:
            while not event.is_set():
                token = self._register(wake, deadline)
                if token is None:
                    break
                try:
                    # A step notifies `wake` (it needs `wake`'s lock, so only while we wait)
                    # and drops the token; the event is only ever polled.
                    while self._registered(token) and not event.is_set():
                        wake.wait(FAKE_EVENT_POLL)
                finally:
                    self._unregister(token)
        return event.is_set()

    def step(self, seconds: float) -> None:
        """Advance the time by `seconds` (>= 0) and wake every blocked waiter."""
        if seconds < 0:
            raise ValueError("a monotonic clock cannot step backwards")
        with self._lock:
            self._now += seconds
        self._wake_all()

    def set_time(self, now: float) -> None:
        """Move the time forward to `now` and wake every blocked waiter."""
        with self._lock:
            if now < self._now:
                raise ValueError("a monotonic clock cannot go backwards")
            self._now = now
        self._wake_all()

    def waiters(self) -> int:
        """Return how many threads are blocked in `wait_until()` or `wait_event()` now."""
        with self._lock:
            return len(self._waiting)

    def wait_for_waiters(self, count: int = 1, timeout: float = DEFAULT_WAITER_TIMEOUT) -> bool:
        """Block until at least `count` threads wait on the clock, or `timeout` real seconds.

        Returns whether the count was reached. Tests assert on the result so that a
        broken background loop fails the test instead of hanging it.
        """
        with self._lock:
            return self._lock.wait_for(lambda: len(self._waiting) >= count, timeout=timeout)

    def _register(self, cond: threading.Condition, deadline: float | None) -> int | None:
        """Count a waiter on `cond`; None (not counted) when `deadline` has passed already."""
        with self._lock:
            # Reading the time and registering happen under one lock, so a concurrent
            # step() either is seen here or finds this waiter and notifies it.
            if deadline is not None and self._now >= deadline:
                return None
            token = next(self._tokens)
            self._waiting[token] = cond
            self._lock.notify_all()
            return token

    def _registered(self, token: int) -> bool:
        with self._lock:
            return token in self._waiting

    def _unregister(self, token: int) -> None:
        with self._lock:
            self._waiting.pop(token, None)

    def _wake_all(self) -> None:
        # Take the waiters out under our lock, then notify each outside it: the waiter holds
        # its condition while registering (condition -> clock lock order), so notifying
        # while holding our lock could deadlock.
        with self._lock:
            woken = list(self._waiting.values())
            self._waiting.clear()
        for cond in woken:
            with cond:
                cond.notify_all()
