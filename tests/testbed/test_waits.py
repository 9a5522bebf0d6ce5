"""``testbed.waits.wait_for``: the first truthy value, or a failure naming what was awaited."""

from __future__ import annotations

import itertools

import pytest

from testbed.waits import wait_for


def test_returns_the_first_truthy_value() -> None:
    """Falsy results are polled past; the first truthy one is returned as it is."""
    results = iter([None, {}, {"state": "inactive"}, {"state": "later"}])
    assert wait_for(lambda: next(results), "a rule", timeout=5, interval=0) == {"state": "inactive"}


def test_fails_naming_what_it_waited_for() -> None:
    """A check that never holds fails after the timeout, saying what it waited for."""
    calls = itertools.count()
    with pytest.raises(AssertionError, match="timed out after 0s waiting for the Lease"):
        wait_for(lambda: next(calls) < 0, "the Lease", timeout=0.05, interval=0.01)
    assert next(calls) > 1  # it polled more than once
