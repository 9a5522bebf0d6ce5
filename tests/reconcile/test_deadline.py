"""A run's stop event follows the operator's and fires at the run's deadline."""

from __future__ import annotations

import threading

from controller.clock import FakeClock
from reconcile.deadline import RunStop
from workspace.runner.types import stop_cause


def test_fires_at_the_deadline_and_says_so() -> None:
    """The event fires at the deadline of the given clock and ``timed_out`` says why."""
    clock = FakeClock()
    with RunStop(threading.Event(), 10.0, clock=clock, poll=0.01) as run:
        clock.step(10.0)
        assert run.event.wait(5)
    assert run.timed_out


def test_follows_the_operator_stop_without_a_timeout() -> None:
    """The operator's stop sets the event without calling it a timeout."""
    stop = threading.Event()
    with RunStop(stop, 3600.0, poll=0.01) as run:
        stop.set()
        assert run.event.wait(5)
    assert not run.timed_out


def test_a_run_that_ends_in_time_is_not_stopped() -> None:
    """A run that ends before its deadline is never stopped."""
    with RunStop(threading.Event(), 3600.0, poll=0.01) as run:
        pass
    assert not run.event.is_set()
    assert not run.timed_out


def test_each_cause_is_told_apart() -> None:
    """The operator's stop is ``shutdown``; the deletion interrupt is ``interrupt``."""
    stop, interrupt = threading.Event(), threading.Event()
    with RunStop(stop, 3600, poll=0.01, interrupt=interrupt) as run_stop:
        interrupt.set()
        assert run_stop.event.wait(5)
    assert (stop_cause(run_stop.event), run_stop.interrupted, run_stop.timed_out) == (
        "interrupt",
        True,
        False,
    )
    stop = threading.Event()
    with RunStop(stop, 3600, poll=0.01) as run_stop:
        stop.set()
        assert run_stop.event.wait(5)
    assert (stop_cause(run_stop.event), run_stop.interrupted) == ("shutdown", False)
