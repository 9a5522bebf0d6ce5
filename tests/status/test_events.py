"""The event recorder: client-go's dedupe, aggregation, spam filter, retries, limits.

Unit tests drive a fake CoreV1Api (``FakeSink``, which keeps the Events it was sent) with
a ``FakeClock``; timestamps follow the fake clock. Integration tests post to the real
apiserver and read the Events back, as ``kubectl describe`` would.
"""

from __future__ import annotations

import datetime
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry

from controller.clock import FakeClock
from status import events
from status.events import NORMAL, WARNING, EventRecorder
from tests.testbed.control_plane import ControlPlane

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
FLUSH = 10.0  # real seconds; only bounds a test that is about to fail


def stack(name: str = "web", uid: str = "uid-1", rv: str = "1") -> dict[str, Any]:
    """A raw Stack as the informer hands it to the reconciler."""
    return {
        "apiVersion": "pulumi.com/v1",
        "kind": "Stack",
        "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv},
    }


def api_error(status: int) -> client.ApiException:
    """An ApiException as the client raises it."""
    return client.ApiException(status=status, reason="test")


class FakeSink:
    """A CoreV1Api stand-in: keeps Events by name, records calls, fails on demand.

    ``failures`` is consumed one per call; ``always_fail`` fails every call; ``gate``, when
    set, makes CREATE wait for it (``entered`` is set once a CREATE is waiting).
    """

    def __init__(self) -> None:
        """No Events, no calls, no failures."""
        self.events: dict[str, client.CoreV1Event] = {}
        self.calls: list[tuple[str, str]] = []
        self.failures: list[BaseException] = []
        self.always_fail: BaseException | None = None
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        self._lock = threading.Lock()

    def create_namespaced_event(
        self, namespace: str, body: client.CoreV1Event, *, _request_timeout: float
    ) -> object:
        """Store ``body`` under its name (409 if taken)."""
        del namespace, _request_timeout
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(FLUSH)
        name = str(body.metadata.name if body.metadata else "")
        self._call("create", name)
        with self._lock:
            if name in self.events:
                raise api_error(409)
            self.events[name] = body
        return body

    def patch_namespaced_event(
        self,
        name: str,
        namespace: str,
        body: dict[str, Any],
        *,
        _content_type: str,
        _request_timeout: float,
    ) -> object:
        """Apply count, lastTimestamp and message (404 if unknown)."""
        del namespace, _request_timeout
        assert _content_type == "application/strategic-merge-patch+json"
        self._call("patch", name)
        with self._lock:
            if name not in self.events:
                raise api_error(404)
            event = self.events[name]
            event.count = body["count"]
            event.last_timestamp = datetime.datetime.fromisoformat(body["lastTimestamp"])
            event.message = body["message"]
        return event

    def _call(self, verb: str, name: str) -> None:
        with self._lock:
            self.calls.append((verb, name))
            failure = self.failures.pop(0) if self.failures else self.always_fail
        if failure is not None:
            raise failure

    def only(self) -> client.CoreV1Event:
        """The single Event stored."""
        assert len(self.events) == 1, list(self.events)
        return next(iter(self.events.values()))

    def messages(self) -> list[str]:
        """Messages of the stored Events, in creation order."""
        return [str(e.message) for e in self.events.values()]


class Harness:
    """A recorder wired to a FakeSink, a FakeClock and a private registry."""

    def __init__(self, instance: str = "pod-0") -> None:
        """Report as ``instance``; the fake clock starts at 0, the wall clock at T0."""
        self.sink = FakeSink()
        self.clock = FakeClock()
        self.registry = CollectorRegistry()
        self.recorder = EventRecorder(
            None,
            instance,
            registry=self.registry,
            clock=self.clock,
            wall=lambda: T0 + datetime.timedelta(seconds=self.clock.now()),
            sink=self.sink,
        )

    def flush(self) -> None:
        """Wait until every queued write is done."""
        assert self.recorder.flush(FLUSH)

    def total(self, result: str, type_: str = NORMAL) -> float:
        """pulumi_stack_events_total{type,result}."""
        value = self.registry.get_sample_value(
            "pulumi_stack_events_total", {"type": type_, "result": result}
        )
        assert value is not None
        return value

    def dropped(self, reason: str) -> float:
        """pulumi_stack_events_dropped_total{reason}."""
        value = self.registry.get_sample_value(
            "pulumi_stack_events_dropped_total", {"reason": reason}
        )
        assert value is not None
        return value


@pytest.fixture
def harness() -> Iterator[Harness]:
    """A Harness whose recorder is closed (and its thread joined) afterwards."""
    h = Harness()
    yield h
    h.sink.gate = None
    assert h.recorder.close(FLUSH)


# -- dedupe -------------------------------------------------------------------------------


def test_identical_repeats_patch_one_event(harness: Harness) -> None:
    """N identical posts: one Event, count N, first/last from the first/last post."""
    for i in range(5):
        # A status write between posts bumps resourceVersion; it is not part of the identity.
        harness.recorder.post(stack(rv=str(i)), WARNING, "UpdateFailed", "boom")
        harness.clock.step(10)
    harness.flush()
    event = harness.sink.only()
    assert event.count == 5
    assert event.first_timestamp == T0
    assert event.last_timestamp == T0 + datetime.timedelta(seconds=40)
    assert [verb for verb, _ in harness.sink.calls] == ["create"] + ["patch"] * 4
    assert (harness.total("created", WARNING), harness.total("patched", WARNING)) == (1, 4)


def test_any_difference_makes_a_new_event(harness: Harness) -> None:
    """Another type, reason, message or object is another Event."""
    harness.recorder.post(stack(), NORMAL, "UpdateStarted", "a")
    harness.recorder.post(stack(), WARNING, "UpdateStarted", "a")
    harness.recorder.post(stack(), NORMAL, "UpdateSucceeded", "a")
    harness.recorder.post(stack(), NORMAL, "UpdateStarted", "b")
    harness.recorder.post(stack(uid="uid-2"), NORMAL, "UpdateStarted", "a")
    harness.flush()
    assert len(harness.sink.events) == 5
    assert {e.count for e in harness.sink.events.values()} == {1}


def test_an_expired_event_is_created_again_with_its_count(harness: Harness) -> None:
    """A PATCH answered 404 (event-ttl passed) re-creates the Event under the same name."""
    harness.recorder.post(stack(), NORMAL, "Destroyed", "gone")
    harness.flush()
    name = str(harness.sink.only().metadata.name)
    harness.sink.events.clear()
    harness.recorder.post(stack(), NORMAL, "Destroyed", "gone")
    harness.flush()
    assert harness.sink.calls == [("create", name), ("patch", name), ("create", name)]
    assert harness.sink.only().count == 2
    assert harness.total("created") == 2


# -- aggregation --------------------------------------------------------------------------


def test_ten_distinct_messages_within_the_window_are_combined(harness: Harness) -> None:
    """The 10th distinct message (same object, type, reason) starts one combined Event."""
    for i in range(12):
        harness.recorder.post(stack(), WARNING, "UpdateFailed", f"error {i}")
        harness.clock.step(59)
    harness.flush()
    # Nine Events of their own, then one combined Event that counts the 10th to 12th.
    assert harness.sink.messages() == [
        *(f"error {i}" for i in range(9)),
        "(combined from similar events): error 11",
    ]
    combined = list(harness.sink.events.values())[-1]
    assert combined.count == 3
    assert combined.reason == "UpdateFailed"
    assert combined.type == WARNING


@pytest.mark.parametrize(("gap", "combined"), [(600, True), (601, False)])
def test_aggregation_window_is_600_seconds(harness: Harness, gap: float, *, combined: bool) -> None:
    """A 10th distinct message more than 600 s after the group's last event starts afresh."""
    for i in range(9):
        harness.recorder.post(stack(), WARNING, "UpdateFailed", f"error {i}")
    harness.clock.step(gap)
    harness.recorder.post(stack(), WARNING, "UpdateFailed", "error 9")
    harness.flush()
    last = harness.sink.messages()[-1]
    assert last == ("(combined from similar events): error 9" if combined else "error 9")
    assert len(harness.sink.events) == 10


def test_aggregation_is_per_reason(harness: Harness) -> None:
    """Distinct messages under different reasons never combine."""
    for i in range(20):
        harness.recorder.post(stack(), NORMAL, f"Reason{i % 2}", f"message {i}")
    harness.flush()
    combined = [m for m in harness.sink.messages() if m.startswith("(combined")]
    assert len(combined) == 2  # one per reason, from each reason's 10th message


# -- spam filter --------------------------------------------------------------------------


def test_spam_filter_allows_25_then_one_per_300_seconds(harness: Harness) -> None:
    """Per object and source: a burst of 25, then one token every 300 s."""
    post = harness.recorder.post
    for i in range(30):
        post(stack(), NORMAL, f"Reason{i}", "m")  # distinct reasons: no dedupe or aggregation
    harness.flush()
    assert len(harness.sink.events) == 25
    assert harness.dropped("rate_limited") == 5
    harness.clock.step(299)
    post(stack(), NORMAL, "Late0", "m")
    harness.clock.step(1)
    post(stack(), NORMAL, "Late1", "m")
    post(stack(), NORMAL, "Late2", "m")
    harness.clock.step(600)
    for i in range(3, 6):
        post(stack(), NORMAL, f"Late{i}", "m")
    harness.flush()
    late = sorted(str(e.reason) for e in harness.sink.events.values() if "Late" in str(e.reason))
    assert late == ["Late1", "Late3", "Late4"]
    assert harness.dropped("rate_limited") == 5 + 3  # the burst's overflow, Late0, 2 and 5
    assert harness.total("dropped") == 8


def test_spam_filter_is_per_object(harness: Harness) -> None:
    """Another object has its own bucket of 25."""
    for i in range(26):
        harness.recorder.post(stack(uid="a"), NORMAL, f"Reason{i}", "m")
        harness.recorder.post(stack(name="other", uid="b"), NORMAL, f"Reason{i}", "m")
    harness.flush()
    assert len(harness.sink.events) == 50
    assert harness.dropped("rate_limited") == 2


def test_dropped_repeats_still_count(harness: Harness) -> None:
    """Count-raising PATCHes spend tokens; the next PATCH that passes carries every repeat."""
    for _ in range(30):
        harness.recorder.post(stack(), WARNING, "UpdateFailed", "boom")
    harness.flush()
    assert harness.sink.only().count == 25
    harness.clock.step(300)
    harness.recorder.post(stack(), WARNING, "UpdateFailed", "boom")
    harness.flush()
    assert harness.sink.only().count == 31


# -- limits and fields --------------------------------------------------------------------


def test_fields_are_cut_to_the_api_limits() -> None:
    """Message ≤ 1024 bytes (marked), reason/action/instance ≤ 128, name ≤ 253."""
    h = Harness(instance="i" * 300)
    try:
        long_name = "a" * 250 + "-b"
        h.recorder.post(stack(name=long_name), WARNING, "R" * 200, "x" * 5000)
        h.recorder.post(stack(uid="2"), WARNING, "UpdateFailed", "é" * 2000)
        h.flush()
    finally:
        assert h.recorder.close(FLUSH)
    long_event, accented = h.sink.events.values()
    long_message, accented_message = str(long_event.message), str(accented.message)
    assert len(long_message.encode()) <= 1024
    assert long_message.endswith("…")
    assert len(long_event.reason or "") == 128
    assert len(long_event.action or "") == 128
    assert len(long_event.reporting_instance or "") == 128
    assert len(accented_message.encode()) <= 1024
    assert accented_message.startswith("éé")
    name = str(long_event.metadata.name)
    assert len(name) <= 253
    assert re.fullmatch(r"a+\.[0-9a-f]+", name)


def test_event_fields(harness: Harness) -> None:
    """Source, reporting fields, action and involvedObject are filled in."""
    harness.recorder.post(stack(), NORMAL, "UpdateStarted", "up", action="Update")
    harness.flush()
    event = harness.sink.only()
    assert event.source is not None
    assert event.source.component == "pulumi-stack-operator"
    assert (event.reporting_component, event.reporting_instance) == (events.COMPONENT, "pod-0")
    assert event.action == "Update"
    assert event.metadata is not None
    assert event.metadata.namespace == "ns"
    ref = event.involved_object
    assert (ref.api_version, ref.kind, ref.name, ref.namespace, ref.uid, ref.resource_version) == (
        "pulumi.com/v1",
        "Stack",
        "web",
        "ns",
        "uid-1",
        "1",
    )
    assert event.first_timestamp == event.last_timestamp == T0
    assert event.first_timestamp is not None
    assert event.first_timestamp.tzinfo is not None


@pytest.mark.parametrize(
    ("obj", "type_"),
    [
        pytest.param(stack(), "Error", id="type"),
        pytest.param({"kind": "Stack"}, NORMAL, id="no-metadata"),
        pytest.param({"metadata": {"namespace": "ns"}}, NORMAL, id="no-name"),
        pytest.param(None, NORMAL, id="not-a-mapping"),
    ],
)
def test_invalid_posts_are_refused_without_raising(harness: Harness, obj: Any, type_: str) -> None:
    """A malformed post is logged and dropped; post() still returns normally."""
    harness.recorder.post(obj, type_, "Reason", "m")
    harness.flush()
    assert harness.sink.calls == []
    assert harness.dropped("invalid") == (0 if obj is None else 1)


# -- failures, queue, shutdown ------------------------------------------------------------


def test_failing_api_never_raises_and_drops_after_the_retries(harness: Harness) -> None:
    """Transient failures are tried MAX_TRIES times, waiting on the clock, then dropped."""
    harness.sink.always_fail = api_error(503)
    harness.recorder.post(stack(), WARNING, "UpdateFailed", "boom")
    for _ in range(events.MAX_TRIES - 1):
        assert harness.clock.wait_for_waiters(1)  # the worker sleeps before its next try
        harness.clock.step(events.RETRY_INTERVAL)
    harness.flush()
    assert len(harness.sink.calls) == events.MAX_TRIES
    assert harness.total("failed", WARNING) == 1
    assert harness.total("created", WARNING) == 0
    # The worker survived: the next event goes through.
    harness.sink.always_fail = None
    harness.recorder.post(stack(), NORMAL, "UpdateSucceeded", "ok")
    harness.flush()
    assert harness.total("created") == 1


def test_a_transient_failure_is_retried(harness: Harness) -> None:
    """A connection error, then success: one Event, written on the second try."""
    harness.sink.failures = [ConnectionResetError("reset")]
    harness.recorder.post(stack(), NORMAL, "UpdateStarted", "up")
    assert harness.clock.wait_for_waiters(1)
    harness.clock.step(events.RETRY_INTERVAL)
    harness.flush()
    assert len(harness.sink.calls) == 2
    assert harness.sink.only().count == 1
    assert harness.total("created") == 1


def test_a_rejected_event_is_not_retried(harness: Harness) -> None:
    """A 4xx answer (here 422) is final: one call, counted as failed, no wait."""
    harness.sink.failures = [api_error(422)]
    harness.recorder.post(stack(), NORMAL, "UpdateStarted", "up")
    harness.flush()
    assert len(harness.sink.calls) == 1
    assert harness.total("failed") == 1


def test_a_slow_api_never_blocks_post_and_the_queue_is_bounded(harness: Harness) -> None:
    """While a CREATE hangs, posts return; beyond QUEUE_SIZE queued writes they are dropped."""
    harness.sink.gate = gate = threading.Event()
    harness.recorder.post(stack(uid="first"), NORMAL, "UpdateStarted", "up")
    assert harness.sink.entered.wait(FLUSH)  # the worker holds the first write

    def post_many() -> None:
        for i in range(events.QUEUE_SIZE + 1):
            harness.recorder.post(stack(uid=f"u{i}"), NORMAL, "UpdateStarted", "up")

    poster = threading.Thread(target=post_many)
    poster.start()
    poster.join(FLUSH)
    assert not poster.is_alive(), "post() blocked on a slow apiserver"
    assert harness.dropped("queue_full") == 1
    gate.set()
    harness.flush()
    assert len(harness.sink.events) == events.QUEUE_SIZE + 1


def test_close_finishes_the_queue_and_refuses_later_posts() -> None:
    """close() writes what was queued, joins the thread; later posts are dropped."""
    h = Harness()
    h.recorder.post(stack(), NORMAL, "UpdateStarted", "up")
    assert h.recorder.close(FLUSH)
    assert len(h.sink.events) == 1
    h.recorder.post(stack(), NORMAL, "UpdateSucceeded", "ok")
    assert h.dropped("closed") == 1
    assert h.recorder.flush(0)


def test_close_cuts_retry_waits_short() -> None:
    """A write waiting to retry gives up at close() instead of sleeping on."""
    h = Harness()
    h.sink.always_fail = api_error(503)
    h.recorder.post(stack(), NORMAL, "UpdateStarted", "up")
    assert h.clock.wait_for_waiters(1)
    assert h.recorder.close(FLUSH)  # no clock step: close() alone ends the wait
    assert len(h.sink.calls) == 1
    assert h.total("failed") == 1


def test_every_series_is_registered_before_any_event() -> None:
    """Both counters expose all their label values at zero (an idle proof reads them)."""
    h = Harness()
    try:
        for type_ in (NORMAL, WARNING):
            for result in ("created", "patched", "failed", "dropped"):
                assert h.total(result, type_) == 0
        for reason in ("rate_limited", "queue_full", "closed", "invalid"):
            assert h.dropped(reason) == 0
    finally:
        assert h.recorder.close(FLUSH)


# -- against the real apiserver -----------------------------------------------------------


class Wall:
    """A settable wall clock for integration tests (aware UTC, near real time)."""

    def __init__(self) -> None:
        """Start five minutes ago."""
        self.now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)

    def __call__(self) -> datetime.datetime:
        """The current (settable) time."""
        return self.now

    def step(self, seconds: float) -> None:
        """Move forward."""
        self.now += datetime.timedelta(seconds=seconds)


@pytest.fixture
def recorder(api_client: client.ApiClient) -> Iterator[tuple[EventRecorder, Wall]]:
    """A real recorder (real clock) posting to the test apiserver, with a settable wall."""
    wall = Wall()
    rec = EventRecorder(api_client, "pod-0", wall=wall)
    yield rec, wall
    assert rec.close(FLUSH)


def config_map(api_client: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """Create a ConfigMap and return it as a raw API object."""
    created = client.CoreV1Api(api_client).create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name))
    )
    raw: dict[str, Any] = api_client.sanitize_for_serialization(created)
    return raw


def events_of(api_client: client.ApiClient, obj: dict[str, Any]) -> list[client.CoreV1Event]:
    """Events regarding ``obj``, as kubectl describe lists them (by lastTimestamp)."""
    meta = obj["metadata"]
    found = client.CoreV1Api(api_client).list_namespaced_event(
        meta["namespace"], field_selector=f"involvedObject.uid={meta['uid']}"
    )
    return sorted(found.items, key=lambda e: e.last_timestamp or T0)


@pytest.mark.integration
def test_identical_posts_make_one_event_with_a_count(
    api_client: client.ApiClient, namespace: str, recorder: tuple[EventRecorder, Wall]
) -> None:
    """Three identical posts: one Event object, count 3, first/last timestamps apart."""
    rec, wall = recorder
    obj = config_map(api_client, namespace, "cm")
    for _ in range(3):
        rec.post(obj, WARNING, "UpdateFailed", "boom")
        wall.step(1)
    assert rec.flush(FLUSH)
    (event,) = events_of(api_client, obj)
    assert event.count == 3
    assert event.first_timestamp is not None
    assert event.last_timestamp is not None
    assert event.last_timestamp - event.first_timestamp == datetime.timedelta(seconds=2)


@pytest.mark.integration
def test_describe_orders_events_by_last_occurrence(
    api_client: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    recorder: tuple[EventRecorder, Wall],
) -> None:
    """A repeat moves its Event after newer ones, in the API and in ``kubectl describe``."""
    rec, wall = recorder
    obj = config_map(api_client, namespace, "ordered")
    rec.post(obj, NORMAL, "UpdateStarted", "first")
    wall.step(10)
    rec.post(obj, NORMAL, "UpdateSucceeded", "second")
    wall.step(10)
    rec.post(obj, NORMAL, "UpdateStarted", "first")
    assert rec.flush(FLUSH)
    assert [(e.reason, e.count) for e in events_of(api_client, obj)] == [
        ("UpdateSucceeded", 1),
        ("UpdateStarted", 2),
    ]
    described = control_plane.kubectl("describe", "configmap", "ordered", "-n", namespace).stdout
    lines = described.split("Events:", 1)[1].splitlines()
    rows = [line.split() for line in lines if "pulumi-stack-operator" in line]
    assert [row[1] for row in rows] == ["UpdateSucceeded", "UpdateStarted"]
    assert "(x2 over" in " ".join(rows[1])


@pytest.mark.integration
def test_events_about_a_stack_are_valid(
    api_client: client.ApiClient, stack_crd: Path, namespace: str
) -> None:
    """A Warning and a Normal post: two Events of those types, every G21 field valid."""
    del stack_crd
    objects = client.CustomObjectsApi(api_client)
    body = {
        "apiVersion": "pulumi.com/v1",
        "kind": "Stack",
        "metadata": {"name": "s"},
        "spec": {"stack": "dev", "projectRepo": "git://127.0.0.1/x.git", "branch": "main"},
    }
    obj: dict[str, Any] = objects.create_namespaced_custom_object(  # type: ignore[assignment]
        "pulumi.com", "v1", namespace, "stacks", body
    )
    rec = EventRecorder(api_client, "i" * 300)
    try:
        rec.post(obj, WARNING, "UpdateFailed", "x" * 5000)
        rec.post(obj, NORMAL, "UpdateSucceeded", "Stack is up to date")
        assert rec.flush(FLUSH)
    finally:
        assert rec.close(FLUSH)
    found = events_of(api_client, obj)
    assert sorted((e.type, e.reason) for e in found) == [
        (NORMAL, "UpdateSucceeded"),
        (WARNING, "UpdateFailed"),
    ]
    for event in found:
        assert_valid(event, obj)


def assert_valid(event: client.CoreV1Event, obj: dict[str, Any]) -> None:
    """G21: type, reason, message, reporting fields, action, involvedObject, timestamps."""
    meta = obj["metadata"]
    assert event.type in {NORMAL, WARNING}
    assert re.fullmatch(r"[A-Z][A-Za-z0-9]*", event.reason or "")
    assert len(event.reason or "") <= 128
    assert 0 < len((event.message or "").encode()) <= 1024
    assert event.reporting_component == "pulumi-stack-operator"
    assert 0 < len(event.reporting_instance or "") <= 128
    assert 0 < len(event.action or "") <= 128
    assert event.source is not None
    assert event.source.component == "pulumi-stack-operator"
    assert event.metadata is not None
    ref = event.involved_object
    assert (ref.api_version, ref.kind, ref.name) == ("pulumi.com/v1", "Stack", "s")
    assert (ref.uid, ref.resource_version) == (meta["uid"], meta["resourceVersion"])
    assert ref.namespace == event.metadata.namespace == meta["namespace"]
    assert event.first_timestamp is not None
    assert event.first_timestamp.utcoffset() == datetime.timedelta(0)
    assert event.last_timestamp == event.first_timestamp
    assert event.count == 1
