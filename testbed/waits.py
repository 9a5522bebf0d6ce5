"""Waiting on a condition in the test bed: poll it, never sleep a fixed time instead.

Provides ``wait_for``: it looks at a condition until it holds and returns what it saw, or
fails, naming what it waited for, once the timeout has passed. It is how the test bed and
the tests synchronise with real processes, and how they show that something is gone (a
process, a lock): by waiting for its absence to be observed, never by sleeping.

Guarantees: the condition is looked at at least once, and once more after the deadline
has passed, so a condition that holds in time is never reported as timed out; the only
error raised on a timeout is ``AssertionError``, which fails a test like a failed assert.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    check: Callable[[], T | None],
    what: str,
    timeout: float,
    interval: float = 0.5,
    *,
    ignoring: tuple[type[Exception], ...] = (),
    detail: Callable[[], str] | None = None,
) -> T:
    """Poll ``check`` every ``interval`` s until it returns a truthy value; return that value.

    An exception of a type in ``ignoring`` raised by ``check`` counts as "not yet" (a server
    still starting refuses connections); others propagate at once.

    Raises:
        AssertionError: naming ``what``, when ``timeout`` seconds passed without one; the
            message ends with the last ignored exception, if any, and ``detail()`` (what is
            still in the way, say), when given.
    """
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            found = check()
        except ignoring as err:
            found, last = None, err
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(_timed_out(what, timeout, last, detail))
        time.sleep(interval)


def _timed_out(
    what: str, timeout: float, last: Exception | None, detail: Callable[[], str] | None
) -> str:
    msg = f"timed out after {timeout:.0f}s waiting for {what}"
    if last is not None:
        msg += f" (last error: {last!r})"
    if detail is not None:
        msg += f": {detail()}"
    return msg
