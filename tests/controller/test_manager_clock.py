"""The manager hands its one clock to every part it builds (no apiserver is reached).

Each test drives a part the manager built on a FakeClock it passed in: a part left on
its own real clock would never wake to the steps, and the test would fail.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from kubernetes import client

from controller.cache import ObjectKey
from controller.clock import FakeClock
from controller.config import parse_config
from controller.manager import Manager, ManagerContext, Resource
from controller.reconciler import Result
from tests.controller.conftest import GROUP, PLURAL, VERSION
from tests.controller.widget_operator import WIDGETS

# Real seconds a background thread may take to react; only ever reached by a failing test.
JOIN_TIMEOUT = 5.0


class Idle:
    """A reconciler that is never given a key in these tests."""

    def reconcile(self, key: ObjectKey, stop: threading.Event) -> Result:
        """Do nothing."""
        del key, stop
        return Result()


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock at t=0."""
    return FakeClock()


@pytest.fixture
def contexts() -> list[ManagerContext]:
    """The contexts the manager hands its reconciler factory."""
    return []


@pytest.fixture
def manager(clock: FakeClock, contexts: list[ManagerContext]) -> Iterator[Manager]:
    """A manager on ``clock`` over an API client that is never called."""

    def new_reconciler(context: ManagerContext) -> Idle:
        contexts.append(context)
        return Idle()

    cfg = parse_config(["--namespaces=ns"], WIDGETS, environ={})
    with client.ApiClient() as api:
        built = Manager(
            cfg,
            "widgets",
            Resource(GROUP, VERSION, PLURAL),
            new_reconciler,
            api_client=api,
            clock=clock,
        )
        yield built
        built.controller.queue.shut_down()


def test_the_reconcilers_context_carries_the_managers_clock(
    manager: Manager, clock: FakeClock, contexts: list[ManagerContext]
) -> None:
    """Reconcilers share the manager's clock instead of making their own."""
    [context] = contexts
    assert context.clock is clock
    assert manager.clock is clock


def test_leading_since_is_read_on_the_managers_clock(
    manager: Manager, clock: FakeClock, contexts: list[ManagerContext]
) -> None:
    """``leading_since`` is the clock's ``now()`` when the Lease was taken (None before)."""
    [context] = contexts
    assert context.leading_since() is None
    clock.step(123.0)
    manager._on_started_leading()  # noqa: SLF001 - what the elector calls
    assert context.leading_since() == 123.0


def test_the_informer_times_its_cache_sync_on_the_managers_clock(
    manager: Manager, clock: FakeClock
) -> None:
    """An informer that never syncs gives up when the manager's clock reaches the timeout."""
    answers: list[bool] = []
    waiter = threading.Thread(
        target=lambda: answers.append(manager.informer.wait_for_cache_sync(300.0)), daemon=True
    )
    waiter.start()
    assert clock.wait_for_waiters(2), "the sync wait and the work queue's delay loop"
    clock.step(300.0)
    waiter.join(JOIN_TIMEOUT)
    assert answers == [False]


def test_the_work_queue_delays_on_the_managers_clock(manager: Manager, clock: FakeClock) -> None:
    """A key added after 10 s is queued once the manager's clock has moved 10 s."""
    queue = manager.controller.queue
    queue.add_after(ObjectKey("ns", "w"), 10.0)
    assert clock.wait_for_waiters(1)
    clock.step(9.0)
    assert clock.wait_for_waiters(1)
    assert len(queue) == 0
    clock.step(1.0)
    assert clock.wait_for_waiters(1)
    assert len(queue) == 1
