"""The event recorder against the real apiserver: Events as ``kubectl describe`` shows them."""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from controller.clock import RealClock
from status.events import NORMAL, WARNING, EventRecorder
from testbed.control_plane import ControlPlane
from tests.status.event_fakes import FLUSH, T0


class Wall(RealClock):
    """The real monotonic clock with a settable wall clock (aware UTC, near real time)."""

    def __init__(self) -> None:
        """Start the wall clock five minutes ago."""
        self.time = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)

    def wall(self) -> datetime.datetime:
        """The current (settable) wall time."""
        return self.time

    def step(self, seconds: float) -> None:
        """Move the wall clock forward."""
        self.time += datetime.timedelta(seconds=seconds)


@pytest.fixture
def recorder(api_client: client.ApiClient) -> Iterator[tuple[EventRecorder, Wall]]:
    """A real recorder (real clock) posting to the test apiserver, with a settable wall."""
    wall = Wall()
    rec = EventRecorder(api_client, "pod-0", clock=wall)
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
    """A Warning and a Normal post: two valid Events of those types (status contract rule 21)."""
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
    """Status contract rule 21: type, reason, message, reporting, action, involvedObject, times."""
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
