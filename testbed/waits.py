"""Waiting on a condition in the test bed: poll it, never sleep a fixed time instead."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(check: Callable[[], T | None], what: str, timeout: float, interval: float = 0.5) -> T:
    """Poll ``check`` every ``interval`` s until it returns a truthy value; return that value.

    Raises:
        AssertionError: naming ``what``, when ``timeout`` seconds passed without one.
    """
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > deadline:
            msg = f"timed out after {timeout:.0f}s waiting for {what}"
            raise AssertionError(msg)
        time.sleep(interval)
    return found
