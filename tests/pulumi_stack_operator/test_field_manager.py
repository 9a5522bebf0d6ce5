"""Every write the operator makes names it: one field manager, the shard's under a selector.

The operator as wired (``pulumi_stack_operator.wiring`` under the ``Manager``, leader
election on, the pod runner) runs against a fake API (``FakeApi`` behind a real
``ApiClient``) that records every request. The manager takes its Lease (create, then
renew); the reconciler's collaborators, taken as the wiring made them, write a status, an
Event and its repeat, the finalizers, a run pod and its conclusion mark. Every POST, PUT
and PATCH must carry the ``fieldManager`` the flags name, and every kind of write must have
been made. The name itself: ``controller.config.field_manager_for``.
"""

from __future__ import annotations

import datetime
import re
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import rest

from controller.cache import ObjectKey
from controller.clock import FakeClock
from controller.config import FIELD_MANAGER_MAX, field_manager_for
from controller.labels import parse_selector
from controller.manager import Manager
from controller.view import ReadYourWritesView
from pulumi_stack_operator import wiring
from pulumi_stack_operator.config import parse_config
from pulumi_stack_operator.wiring import STACKS, stack_reconciler_factory
from reconcile.collaborators import Collaborators
from status import conditions as cond
from status.events import WARNING
from testbed.process import free_port
from testbed.waits import wait_for
from tests.controller.client_failures import Collection, FakeApi, response
from tests.pulumi_stack_operator.test_loops_survive import (
    NS,
    STACKS_PATH,
    Leases,
    drive,
    running,
    served_by_pulumi_com,
    stack,
)
from tests.workspace.runner.pod.test_runner import JOB
from workspace.runner import PodRunner

SHARD = "shard=a"
MANAGER = "pulumi-stack-operator:shard=a"
WRITES = {"POST", "PUT", "PATCH"}
TIMEOUT = 30.0  # real seconds; only a failing test waits this long
NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
WEB = {
    **stack("web"),
    "metadata": {
        **stack("web")["metadata"],
        "uid": "uid-1",
        "resourceVersion": "7",
        "labels": {"shard": "a"},
    },
}
"""A Stack of the shard, which the operator's informer never lists (no reconcile runs)."""


class RecordingApi(FakeApi):
    """A ``FakeApi`` that records the method, path and ``fieldManager`` of every write."""

    def __init__(self) -> None:
        """Nothing recorded yet."""
        super().__init__()
        self.writes: list[tuple[str, str, str | None]] = []
        self._recording = threading.Lock()

    def request(self, method: str, url: str, **kwargs: Any) -> rest.RESTResponse:
        """Record a write, then answer it as the fake does."""
        if method in WRITES:
            parts = urllib.parse.urlsplit(url)
            manager = dict(urllib.parse.parse_qsl(parts.query)).get("fieldManager")
            with self._recording:
                self.writes.append((method, parts.path, manager))
        return super().request(method, url, **kwargs)

    def kinds(self) -> set[tuple[str, str]]:
        """(method, resource) of every write so far: ``("PATCH", "stacks/status")``."""
        with self._recording:
            return {(method, _resource(path)) for method, path, _ in self.writes}


def _resource(path: str) -> str:
    """``stacks/status``, ``stacks``, ``events``, ``pods``, ``leases`` from a request path."""
    found = re.search(r"/namespaces/[^/]+/(?P<plural>[^/]+)(?:/[^/]+(?P<sub>/status)?)?$", path)
    assert found is not None, path
    return found["plural"] + (found["sub"] or "")


def answer(status: int, obj: Mapping[str, Any] | None = None) -> Any:
    """A route answering ``status`` with ``obj``, else with the request's own body."""

    def route(match: re.Match[str], kwargs: Mapping[str, Any]) -> rest.RESTResponse:
        del match
        body = kwargs["body"] if obj is None else obj
        return response(status, body if isinstance(body, dict) else {})

    return route


@pytest.fixture
def api() -> Iterator[RecordingApi]:
    """The fake API: no Stack listed, ``WEB`` patched, Leases, Events, Pods; closed after."""
    fake = RecordingApi()
    fake.route("PATCH", f"{STACKS_PATH}/web(/status)?", answer(200, WEB))
    Collection(fake, STACKS_PATH)
    served_by_pulumi_com(fake)
    fake.route("POST", "/api/v1/namespaces/[^/]+/(events|pods)", answer(201))
    fake.route("PATCH", "/api/v1/namespaces/[^/]+/(events|pods)/[^/]+", answer(200))
    yield fake
    fake.close()


def test_every_write_of_a_shard_carries_its_field_manager(
    api: RecordingApi, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Lease, status, Event, finalizers and run pod: all written as the shard's manager."""
    leases = Leases(api)
    cfg = parse_config(
        [
            f"--namespaces={NS}",
            f"--work-dir={tmp_path / 'work'}",
            f"--stack-selector={SHARD}",
            "--metrics-bind-address=127.0.0.1:0",
            f"--health-probe-bind-address=127.0.0.1:{free_port()}",
            "--leader-elect",
            f"--leader-election-namespace={NS}",
            "--runner=pod",
            "--run-image=operator:1",
        ],
        environ={},
    )
    assert cfg.manager.field_manager == MANAGER
    parts = wired_parts(monkeypatch)
    monkeypatch.setenv("PULUMI_PYTHON_CMD", "python3")  # the wiring sets it if unset
    monkeypatch.setenv("PULUMI_SKIP_UPDATE_CHECK", "true")
    clock = FakeClock()
    manager = Manager(
        cfg.manager,
        "stacks",
        STACKS,
        stack_reconciler_factory(cfg),
        api_client=api.install(monkeypatch),
        clock=clock,
    )
    with running(manager, clock):
        drive(clock, lambda: leases.writes >= 2, "the Lease taken and renewed", step=5.0)
        write_through_each_collaborator(parts[0])
        wait_for(lambda: ("PATCH", "events") in api.kinds(), "the Event's repeat", TIMEOUT)

    assert api.kinds() >= {
        ("POST", "leases"),
        ("PUT", "leases"),
        ("PATCH", "stacks/status"),
        ("PATCH", "stacks"),
        ("POST", "events"),
        ("PATCH", "events"),
        ("POST", "pods"),
        ("PATCH", "pods"),
    }
    assert {manager for _, _, manager in api.writes} == {MANAGER}, api.writes


def wired_parts(monkeypatch: pytest.MonkeyPatch) -> list[Collaborators]:
    """The collaborators the wiring will make (filled in when the manager builds it)."""
    made: list[Collaborators] = []

    def collaborators(**kwargs: Any) -> Collaborators:
        made.append(Collaborators(**kwargs))
        return made[-1]

    monkeypatch.setattr(wiring, "Collaborators", collaborators)
    return made


def write_through_each_collaborator(parts: Collaborators) -> None:
    """A status, an Event twice, the finalizers, a run pod and its conclusion mark."""
    key = ObjectKey.of(WEB)
    assert isinstance(parts.view, ReadYourWritesView)
    parts.view.observe(WEB)  # as if the informer had it: the shard has this Stack
    assert parts.writer.update(key, lambda s: cond.progressing(s, 1, "running", NOW))
    for _ in range(2):
        parts.events.post(WEB, WARNING, "UpdateFailed", "boom")
    parts.patcher.set_finalizers(key, "7", ["finalizer.stack.pulumi.com"])
    assert isinstance(parts.runner, PodRunner)
    pod = {"metadata": {"name": "web-pulumi", "namespace": JOB.namespace}}
    parts.runner.api.create(JOB, pod)
    parts.runner.api.mark_concluded(JOB, "pod-uid", "2026-01-01T00:00:00Z")


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("", "pulumi-stack-operator"),
        ("shard=a", "pulumi-stack-operator:shard=a"),
        ("shard!=a", "pulumi-stack-operator:shard!=a"),
        ("env in (b, a), !canary", "pulumi-stack-operator:!canary,env in (a,b)"),
    ],
)
def test_the_field_manager_names_the_operator_and_its_shard(selector: str, expected: str) -> None:
    """The operator's name, and the selector's canonical form after it for a shard."""
    argv = [f"--stack-selector={selector}"] if selector else []
    assert parse_config(argv, {}).manager.field_manager == expected
    assert field_manager_for("pulumi-stack-operator", parse_selector(selector)) == expected


def test_a_long_selector_gives_a_short_field_manager() -> None:
    """Past 128 characters the selector's digest stands in for it (the Lease's suffix)."""
    selector = parse_selector(",".join(f"team-{i}.example.com/shard=value-{i}" for i in range(5)))
    name = field_manager_for("pulumi-stack-operator", selector)
    assert len(name) <= FIELD_MANAGER_MAX
    assert re.fullmatch(r"pulumi-stack-operator:[0-9a-f]{8}", name)
    assert name == field_manager_for("pulumi-stack-operator", parse_selector(str(selector)))
    assert name.isprintable()
