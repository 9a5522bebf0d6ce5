"""Fakes for the event recorder's unit tests: a CoreV1Api stand-in and a wired recorder.

``FakeSink`` keeps the Events it was sent (and the field manager of each write) and fails on
demand; ``Harness`` wires a recorder writing as ``FIELD_MANAGER`` to it, to a ``FakeClock``
(whose ``wall()`` stamps the Events, from ``T0``) and to a private registry.
"""

from __future__ import annotations

import datetime
import threading
from typing import Any

from kubernetes import client
from prometheus_client import CollectorRegistry

from controller.clock import FakeClock
from status.events import NORMAL, EventRecorder

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
"""The fake clock's wall time at 0 s."""
FLUSH = 10.0  # real seconds; only bounds a test that is about to fail
FIELD_MANAGER = "pulumi-stack-operator:shard=a"


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
        self.field_managers: list[str | None] = []  # of every call, in order
        self.failures: list[BaseException] = []
        self.always_fail: BaseException | None = None
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        self._lock = threading.Lock()

    def create_namespaced_event(
        self,
        namespace: str,
        body: client.CoreV1Event,
        *,
        field_manager: str | None,
        _request_timeout: float,
    ) -> object:
        """Store ``body`` under its name (409 if taken)."""
        del namespace, _request_timeout
        self.field_managers.append(field_manager)
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
        field_manager: str | None,
        _content_type: str,
        _request_timeout: float,
    ) -> object:
        """Apply count, lastTimestamp and message (404 if unknown)."""
        del namespace, _request_timeout
        self.field_managers.append(field_manager)
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
        """Report as ``instance``; the fake clock starts at 0, its wall clock at T0."""
        self.sink = FakeSink()
        self.clock = FakeClock()
        self.registry = CollectorRegistry()
        self.recorder = EventRecorder(
            None,
            instance,
            registry=self.registry,
            clock=self.clock,
            sink=self.sink,
            field_manager=FIELD_MANAGER,
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
