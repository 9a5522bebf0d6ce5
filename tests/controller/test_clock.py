"""The clock contract: monotonic time, and waits that end on deadline or notification."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable

import pytest

from controller.clock import FAKE_EPOCH, Clock, FakeClock, RealClock

# Real seconds a helper thread may take to react; only ever reached by a failing test.
JOIN_TIMEOUT = 5.0


def start_waiter(clock: Clock, cond: threading.Condition, deadline: float) -> threading.Thread:
    """Start a thread that waits on `cond` until `clock` reaches `deadline`."""

    def wait() -> None:
        with cond:
            while clock.now() < deadline:
                clock.wait_until(cond, deadline)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread


def test_fake_clock_starts_at_start_and_moves_only_when_stepped() -> None:
    """The fake time is the start value until step() or set_time() moves it."""
    clock = FakeClock(start=42.0)
    assert clock.now() == 42.0
    clock.step(1.5)
    assert clock.now() == 43.5
    clock.set_time(50.0)
    assert clock.now() == 50.0


@pytest.mark.parametrize(
    "move",
    [
        pytest.param(lambda clock: clock.step(-1.0), id="negative-step"),
        pytest.param(lambda clock: clock.set_time(9.0), id="set-time-backwards"),
    ],
)
def test_fake_clock_refuses_to_go_backwards(move: Callable[[FakeClock], None]) -> None:
    """Stepping back or setting an earlier time raises instead of breaking monotonicity."""
    clock = FakeClock(start=10.0)
    with pytest.raises(ValueError, match="backwards"):
        move(clock)
    assert clock.now() == 10.0


def test_fake_wait_until_returns_at_once_when_deadline_passed() -> None:
    """A deadline already reached returns without blocking or registering a waiter."""
    clock = FakeClock(start=5.0)
    cond = threading.Condition()
    with cond:
        clock.wait_until(cond, 5.0)
    assert clock.waiters() == 0


def test_fake_step_wakes_waiter_only_once_deadline_reached() -> None:
    """A waiter sleeps through a step short of its deadline and ends at the step reaching it."""
    clock = FakeClock()
    cond = threading.Condition()
    thread = start_waiter(clock, cond, deadline=1.0)
    assert clock.wait_for_waiters(1)

    clock.step(0.5)
    assert clock.wait_for_waiters(1), "the waiter should block again before its deadline"
    assert thread.is_alive()

    clock.step(0.5)
    thread.join(JOIN_TIMEOUT)
    assert not thread.is_alive()
    assert clock.waiters() == 0


def test_fake_set_time_wakes_waiters() -> None:
    """set_time() past a deadline wakes the waiter like step() does."""
    clock = FakeClock()
    cond = threading.Condition()
    thread = start_waiter(clock, cond, deadline=3.0)
    assert clock.wait_for_waiters(1)
    clock.set_time(3.0)
    thread.join(JOIN_TIMEOUT)
    assert not thread.is_alive()


def test_fake_wait_until_ends_on_notify_without_deadline() -> None:
    """With no deadline the wait lasts until the condition is notified."""
    clock = FakeClock()
    cond = threading.Condition()
    woken = threading.Event()

    def wait() -> None:
        with cond:
            clock.wait_until(cond, None)
        woken.set()

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    assert clock.wait_for_waiters(1)
    with cond:
        cond.notify_all()
    thread.join(JOIN_TIMEOUT)
    assert woken.is_set()


def test_fake_wait_for_waiters_times_out_when_nobody_waits() -> None:
    """wait_for_waiters() reports False instead of hanging when no thread blocks."""
    assert not FakeClock().wait_for_waiters(1, timeout=0.01)


def test_real_clock_is_monotonic() -> None:
    """Two readings of the real clock never go backwards."""
    clock = RealClock()
    first = clock.now()
    assert clock.now() >= first


def test_real_wait_until_returns_once_deadline_passes() -> None:
    """A real waiter with a deadline a millisecond away ends without being notified."""
    clock = RealClock()
    thread = start_waiter(clock, threading.Condition(), deadline=clock.now() + 0.001)
    thread.join(JOIN_TIMEOUT)
    assert not thread.is_alive()


def test_real_wait_until_ends_on_notify() -> None:
    """A real waiter with a far deadline ends when its condition is notified."""
    clock = RealClock()
    cond = threading.Condition()
    woken = threading.Event()

    def wait() -> None:
        with cond:
            while not woken.is_set():
                clock.wait_until(cond, clock.now() + 3600.0)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    with cond:
        woken.set()
        cond.notify_all()
    thread.join(JOIN_TIMEOUT)
    assert not thread.is_alive()


def start_event_waiter(
    clock: Clock, event: threading.Event, deadline: float | None
) -> tuple[threading.Thread, list[bool]]:
    """Start a thread in `clock.wait_event(event, deadline)`; its answer lands in the list."""
    answers: list[bool] = []
    thread = threading.Thread(
        target=lambda: answers.append(clock.wait_event(event, deadline)), daemon=True
    )
    thread.start()
    return thread, answers


def test_fake_wait_event_lasts_until_a_step_reaches_the_deadline() -> None:
    """A fake event wait sleeps through a short step and ends, unset, at the deadline."""
    clock = FakeClock()
    thread, answers = start_event_waiter(clock, threading.Event(), deadline=2.0)
    assert clock.wait_for_waiters(1)
    clock.step(1.0)
    assert clock.wait_for_waiters(1), "the waiter should block again before its deadline"
    assert answers == []
    clock.step(1.0)
    thread.join(JOIN_TIMEOUT)
    assert answers == [False]
    assert clock.waiters() == 0


@pytest.mark.parametrize(
    "deadline", [pytest.param(3600.0, id="far"), pytest.param(None, id="none")]
)
def test_fake_wait_event_ends_when_the_event_is_set(deadline: float | None) -> None:
    """Setting the event ends a fake wait with True while the fake time stands still."""
    clock = FakeClock()
    event = threading.Event()
    thread, answers = start_event_waiter(clock, event, deadline)
    assert clock.wait_for_waiters(1)
    event.set()
    thread.join(JOIN_TIMEOUT)
    assert answers == [True]
    assert clock.now() == 0.0
    assert clock.waiters() == 0


def test_fake_wait_event_returns_at_once_when_set_or_past_the_deadline() -> None:
    """Nothing to wait for: no waiter is registered."""
    clock = FakeClock(start=5.0)
    assert not clock.wait_event(threading.Event(), 5.0)
    done = threading.Event()
    done.set()
    assert clock.wait_event(done, 3600.0)
    assert clock.waiters() == 0


def test_real_wait_event_ends_at_the_deadline_or_when_set() -> None:
    """The real clock's event wait is Event.wait with the time left as its timeout."""
    clock = RealClock()
    assert not clock.wait_event(threading.Event(), clock.now() + 0.001)
    event = threading.Event()
    thread, answers = start_event_waiter(clock, event, clock.now() + 3600.0)
    event.set()
    thread.join(JOIN_TIMEOUT)
    assert answers == [True]


def test_the_fake_wall_clock_moves_with_the_fake_time() -> None:
    """wall() is FAKE_EPOCH plus the fake time, so objects and logs get known instants."""
    clock = FakeClock(start=1.5)
    assert clock.wall() == FAKE_EPOCH + datetime.timedelta(seconds=1.5)
    clock.step(60)
    assert clock.wall() == FAKE_EPOCH + datetime.timedelta(seconds=61.5)
