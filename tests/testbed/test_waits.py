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


def test_ignored_errors_count_as_not_yet() -> None:
    """An ignored error is polled past; the first truthy value after it is returned."""
    results = iter([ConnectionRefusedError("starting"), None, "up"])

    def check() -> str | None:
        result = next(results)
        if isinstance(result, Exception):
            raise result
        return result

    assert wait_for(check, "the server", timeout=5, interval=0, ignoring=(OSError,)) == "up"


def test_a_timeout_names_the_last_ignored_error_and_the_detail() -> None:
    """The failure ends with the last ignored error and what ``detail`` says is in the way."""

    def refused() -> None:
        raise ConnectionRefusedError(111, "Connection refused")

    with pytest.raises(AssertionError, match=r"the port \(last error: Connection.*: 1 left$"):
        wait_for(
            refused,
            "the port",
            timeout=0.02,
            interval=0.01,
            ignoring=(OSError,),
            detail=lambda: "1 left",
        )


def test_an_error_not_ignored_propagates_at_once() -> None:
    """Only the listed error types mean "not yet"; any other one ends the wait."""
    calls = itertools.count()

    def broken() -> None:
        next(calls)
        raise ValueError("a bug in the check")

    with pytest.raises(ValueError, match="a bug in the check"):
        wait_for(broken, "anything", timeout=5, interval=0, ignoring=(OSError,))
    assert next(calls) == 1  # it was called once
