"""A ThreadGroup is joined by a deadline of its clock, never by a real timeout."""

from __future__ import annotations

import threading

import structlog

from controller.clock import FakeClock
from controller.threads import ThreadGroup

# Real seconds a helper thread may take to react; only ever reached by a failing test.
JOIN_TIMEOUT = 5.0


def start_join(group: ThreadGroup, deadline: float | None) -> tuple[threading.Thread, list[bool]]:
    """Call `group.join_until(deadline)` in a thread; its answer lands in the list."""
    answers: list[bool] = []
    thread = threading.Thread(
        target=lambda: answers.append(group.join_until(deadline)), daemon=True
    )
    thread.start()
    return thread, answers


def test_join_gives_up_when_the_fake_clock_reaches_the_deadline() -> None:
    """A thread that never returns holds the join only until a step reaches the deadline."""
    clock, release = FakeClock(), threading.Event()
    group = ThreadGroup(clock)
    group.start(release.wait, "blocked")
    joiner, answers = start_join(group, deadline=600.0)
    assert clock.wait_for_waiters(1)
    clock.step(599.0)
    assert clock.wait_for_waiters(1), "the join should wait again before its deadline"
    assert answers == []
    clock.step(1.0)
    joiner.join(JOIN_TIMEOUT)
    assert answers == [False]
    assert group.alive()
    release.set()
    assert group.join_until(None)
    assert not group.alive()


def test_join_returns_as_soon_as_every_thread_returned() -> None:
    """No step needed: the last thread to return wakes the join, and none is left alive."""
    clock, release = FakeClock(), threading.Event()
    group = ThreadGroup(clock)
    threads = [group.start(release.wait, f"worker-{n}") for n in range(3)]
    joiner, answers = start_join(group, deadline=600.0)
    assert clock.wait_for_waiters(1)
    release.set()
    joiner.join(JOIN_TIMEOUT)
    assert answers == [True]
    assert clock.now() == 0.0
    assert not any(t.is_alive() for t in threads)
    assert group.started() == 3


def test_an_empty_group_is_joined_and_alive() -> None:
    """Nothing started: join is True at once, and no thread has died."""
    group = ThreadGroup(FakeClock())
    assert group.join_until(0.0)
    assert group.alive()
    assert group.started() == 0


def test_a_thread_ended_by_an_exception_says_so_and_the_group_is_not_alive() -> None:
    """The exception is logged with the thread's name (not lost on stderr); alive() is False."""

    def boom() -> None:
        raise RuntimeError("a bug")

    group = ThreadGroup(FakeClock())
    with structlog.testing.capture_logs() as logs:
        group.start(boom, "doomed")
        assert group.join_until(None)
    assert not group.alive()
    [line] = logs
    assert (line["event"], line["thread"], line["log_level"]) == (
        "A thread ended by an exception",
        "doomed",
        "error",
    )


def test_a_thread_counts_as_started_and_running_from_its_first_statement() -> None:
    """A probe asking while a thread starts never finds it missing or dead."""
    group = ThreadGroup(FakeClock())
    seen: list[tuple[int, bool]] = []
    group.start(lambda: seen.append((group.started(), group.alive())), "first")
    assert group.join_until(None)
    assert seen == [(1, True)]
    assert not group.alive()  # it has returned
