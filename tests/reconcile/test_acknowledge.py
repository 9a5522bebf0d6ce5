"""The acknowledger writes the first status of a new generation, and nothing else."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Mapping
from typing import Any

import pytest
import structlog

from controller.cache import ObjectKey
from controller.clock import FakeClock
from reconcile import acknowledge
from reconcile.acknowledge import Acknowledger, acknowledgment, pending_generation
from reconcile.context import Mutation
from testbed.waits import wait_for

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def stack(name: str, generation: int, status: dict[str, Any] | None = None) -> dict[str, Any]:
    """An unstructured Stack in namespace ns."""
    obj: dict[str, Any] = {"metadata": {"namespace": "ns", "name": name, "generation": generation}}
    if status is not None:
        obj["status"] = status
    return obj


class FakeWriter:
    """The StatusWriter call and the view read the acknowledger makes, on a dict of objects."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        """Hold ``objects`` by key."""
        self.objects = {ObjectKey("ns", o["metadata"]["name"]): o for o in objects}
        self.written: list[ObjectKey] = []
        self.wrote = threading.Condition()

    def get(self, key: ObjectKey) -> Mapping[str, Any] | None:
        """The stored object (the view's read)."""
        return self.objects.get(key)

    def forget(self, key: ObjectKey) -> None:
        """Nothing is kept beyond ``objects``."""

    def publish(self, key: ObjectKey, mutate: Mutation) -> None:
        """Never called: the acknowledger writes conclusions only."""
        raise AssertionError((key, mutate))

    def discard(self, key: ObjectKey) -> None:
        """Nothing is ever pending."""

    def update(self, key: ObjectKey, mutate: Mutation) -> bool:
        """Apply ``mutate`` to the stored status, recording a write when it changed it."""
        old = dict(self.objects[key].get("status") or {})
        new = mutate(old)
        with self.wrote:
            if new != old:
                self.objects[key]["status"] = new
                self.written.append(key)
            self.wrote.notify_all()
        return new != old

    def wait_written(self, key: ObjectKey) -> None:
        """Wait until ``key`` was written."""
        with self.wrote:
            assert self.wrote.wait_for(lambda: key in self.written, timeout=10)


def start(writer: FakeWriter) -> Acknowledger:
    """An active acknowledger writing through ``writer``."""
    return Acknowledger(writer, writer, active=lambda: True, clock=FakeClock())


def test_a_new_stack_is_acknowledged_with_its_generation() -> None:
    """A status-less Stack gets observedGeneration and Reconciling=True at once."""
    writer = FakeWriter(stack("a", 1))
    ack = start(writer)
    try:
        ack.on_add(writer.objects[ObjectKey("ns", "a")])
        writer.wait_written(ObjectKey("ns", "a"))
    finally:
        ack.close()
    status = writer.objects[ObjectKey("ns", "a")]["status"]
    assert status["observedGeneration"] == 1
    types = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert types == {"Reconciling": ("True", "Progressing"), "Ready": ("Unknown", "Progressing")}


def test_seen_running_deleting_and_inactive_stacks_are_left_alone() -> None:
    """Seen generations, runs in flight and deletions are not acknowledged."""
    seen = stack("seen", 2, {"observedGeneration": 2})
    running = stack("running", 3, {"observedGeneration": 2, "currentUpdate": {"generation": 2}})
    deleting = stack("deleting", 2)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    marker = stack("marker", 1)
    writer = FakeWriter(seen, running, deleting, marker)
    ack = start(writer)
    try:
        for obj in (seen, running, deleting):
            ack.on_update(obj, obj)
        ack.on_add(marker)  # a positive control: handled after the three above
        writer.wait_written(ObjectKey("ns", "marker"))
    finally:
        ack.close()
    assert writer.written == [ObjectKey("ns", "marker")]


def test_a_standby_writes_nothing() -> None:
    """A replica that is not active writes nothing."""
    writer = FakeWriter(stack("a", 1))
    asked = threading.Event()

    def standby() -> bool:
        asked.set()  # the key was taken and judged: the positive control
        return False

    ack = Acknowledger(writer, writer, active=standby, clock=FakeClock())
    ack.on_add(writer.objects[ObjectKey("ns", "a")])
    assert asked.wait(10)
    assert ack.close()
    assert writer.written == []


def test_the_mutation_never_moves_observed_generation_back() -> None:
    """ObservedGeneration only moves forward, and never during a run."""
    assert acknowledgment(2, NOW)({"observedGeneration": 3}) == {"observedGeneration": 3}
    running = {"observedGeneration": 1, "currentUpdate": {"generation": 1}}
    assert acknowledgment(2, NOW)(running) == running
    assert acknowledgment(2, NOW)({"observedGeneration": 0})["observedGeneration"] == 2


def test_pending_generation_reads_the_crd_default_status_as_not_seen() -> None:
    """The CRD's default status (observedGeneration 0) is not an acknowledgment."""
    assert pending_generation(stack("a", 1, {"observedGeneration": 0})) == 1
    assert pending_generation(stack("a", 1, {"observedGeneration": 1})) is None


def test_a_failing_write_does_not_end_the_thread() -> None:
    """One Stack's failed write leaves the thread serving the others, after a backoff."""
    writer = FakeWriter(stack("bad", 1), stack("good", 1))

    def boom(key: ObjectKey, mutate: Mutation) -> bool:
        if key.name == "bad":
            raise RuntimeError("a bug")
        return FakeWriter.update(writer, key, mutate)

    writer.update = boom  # type: ignore[method-assign]
    clock = FakeClock()
    ack = Acknowledger(writer, writer, active=lambda: True, clock=clock)
    try:
        ack.on_add(writer.objects[ObjectKey("ns", "bad")])
        ack.on_add(writer.objects[ObjectKey("ns", "good")])
        assert clock.wait_for_waiters(1), "the thread backs off on its clock"
        clock.step(30.0)
        writer.wait_written(ObjectKey("ns", "good"))
        assert ack.alive()
    finally:
        ack.close()


def test_a_stack_whose_write_may_pass_later_is_offered_again() -> None:
    """A client failure (the API server away): the same Stack is written after the backoff."""
    writer = FakeWriter(stack("a", 1))
    failures = [ConnectionRefusedError(111, "Connection refused")]

    def flaky(key: ObjectKey, mutate: Mutation) -> bool:
        if failures:
            raise failures.pop()
        return FakeWriter.update(writer, key, mutate)

    writer.update = flaky  # type: ignore[method-assign]
    clock = FakeClock()
    ack = Acknowledger(writer, writer, active=lambda: True, clock=clock)
    with structlog.testing.capture_logs() as logs:
        try:
            ack.on_add(writer.objects[ObjectKey("ns", "a")])
            assert clock.wait_for_waiters(1), "the thread backs off on its clock"
            clock.step(30.0)
            writer.wait_written(ObjectKey("ns", "a"))
        finally:
            ack.close()
    events = [e["event"] for e in logs if e.get("loop") == "acknowledger"]
    assert events == ["A loop failed; backing off", "A loop recovered"]


class SlowWriter(FakeWriter):
    """A writer whose PATCH takes ``seconds`` on ``clock``."""

    def __init__(self, clock: FakeClock, seconds: float, *objects: dict[str, Any]) -> None:
        """Hold ``objects``; each update steps ``clock`` by ``seconds``."""
        super().__init__(*objects)
        self.clock, self.seconds = clock, seconds

    def update(self, key: ObjectKey, mutate: Mutation) -> bool:
        """Take ``seconds``, then write."""
        self.clock.step(self.seconds)
        return super().update(key, mutate)


def test_each_acknowledgment_logs_its_legs_at_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    """Delivery, queue and write times (ms) from the watch event's receipt to the PATCH."""
    clock = FakeClock(100.0)
    writer = SlowWriter(clock, 0.05, stack("a", 1))
    monkeypatch.setattr(acknowledge, "received_at", lambda: 99.99)  # 10 ms before the offer
    ack = Acknowledger(writer, writer, active=lambda: True, clock=clock)
    with structlog.testing.capture_logs() as logs:
        try:
            ack.on_add(writer.objects[ObjectKey("ns", "a")])
            writer.wait_written(ObjectKey("ns", "a"))
            entry = wait_for(
                lambda: [e for e in logs if e["event"] == "Acknowledged"], "the log", 10
            )
        finally:
            ack.close()
    [logged] = entry
    assert logged["log_level"] == "debug"
    assert (logged["key"], logged["generation"]) == ("ns/a", 1)
    assert (logged["delivery_ms"], logged["queued_ms"]) == (10.0, 0.0)
    assert (logged["write_ms"], logged["total_ms"]) == (50.0, 60.0)
