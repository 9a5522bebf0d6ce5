"""What the run-pod fault tests check of every fault: the status, Events, metrics agree.

``Faulted`` is taken once a Stack showed a failure: the version of the Stack the watch saw
with Ready=False and that reason, the Stack's Events, and the operator's metrics through
its Service. ``assert_says`` checks that each of them names the fault, in words a user
can act on: Ready's message, ``status.lastUpdate``'s message and a Warning Event's all
hold the same fragments, and the pod-failure counter grew for the pod's reason.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from testbed.node import deployment
from testbed.waits import wait_for
from tests.e2e.conftest import Stacks, find
from tests.node.test_pod_runner import pod_stack

FAILED = "pulumi_stack_run_pods_failed"
CREATED = "pulumi_stack_run_pods_created"


def counter(metrics: str, family: str, **labels: str) -> float:
    """The value of ``family``'s counter with ``labels`` in the text ``metrics`` (0: none)."""
    for found in text_string_to_metric_families(metrics):
        if found.name != family:
            continue
        for sample in found.samples:
            wanted = all(sample.labels.get(k) == v for k, v in labels.items())
            if sample.name.endswith("_total") and wanted:
                return float(sample.value)
    return 0.0


def metrics(node_cluster: Any) -> str:
    """The operator's /metrics, through its Service."""
    return deployment.metrics_through_service(node_cluster)


fault_stack = pod_stack
"""A files-program Stack whose run pods mount the state claim (``pod_stack``)."""


def template(body: dict[str, Any]) -> dict[str, Any]:
    """The Stack's ``workspaceTemplate.spec`` (to add image, resources, scheduling)."""
    spec: dict[str, Any] = body["spec"]["workspaceTemplate"]["spec"]
    return spec


@dataclasses.dataclass(frozen=True)
class Faulted:
    """A Stack's failure as the watch saw it, and what was said about it elsewhere."""

    stack: dict[str, Any]
    events: list[Any]
    metrics: str

    @property
    def message(self) -> str:
        """Ready's message in that version."""
        return str((find(self.stack, "Ready") or {}).get("message") or "")

    def assert_says(self, reason: str, *fragments: str) -> None:
        """Ready=False ``reason``; Ready, lastUpdate and an Event name every fragment."""
        ready = find(self.stack, "Ready") or {}
        assert ready.get("status") == "False", ready
        assert ready.get("reason") == reason, ready
        last = self.stack["status"].get("lastUpdate") or {}
        assert last.get("state") == "failed", last
        for fragment in fragments:
            assert fragment in self.message, (fragment, self.message)
            assert fragment in str(last.get("message")), (fragment, last)
        warned = [e for e in self.events if e.reason == reason and e.type == "Warning"]
        assert any(all(f in (e.message or "") for f in fragments) for e in warned), [
            e.message for e in warned
        ]


def faulted(
    stacks: Stacks,
    node_cluster: Any,
    name: str,
    reason: str,
    fragment: str | tuple[str, ...],
    timeout: float,
) -> Faulted:
    """Wait for the watch to see Ready ``reason`` naming ``fragment`` (or one of them).

    Returns that version with the Stack's Events and the metrics then.
    """
    assert stacks.watcher is not None
    watcher = stacks.watcher
    wanted = (fragment,) if isinstance(fragment, str) else fragment

    def readies() -> list[Mapping[str, Any]]:
        return [find(v, "Ready") or {} for v in watcher.versions(name)]

    def seen() -> dict[str, Any] | None:
        for version in watcher.versions(name):
            ready = find(version, "Ready") or {}
            said = str(ready.get("message"))
            if ready.get("reason") == reason and any(f in said for f in wanted):
                return dict(version)
        return None

    def shown() -> str:
        return dump([(r.get("reason"), r.get("message")) for r in readies()][-5:])

    what = f"{name}: Ready {reason} naming {wanted}"
    stack = wait_for(seen, what, timeout, 0.25, detail=shown)
    events = stacks.wait_events(name, reason)
    return Faulted(stack, events, metrics(node_cluster))


def wait_counted(node_cluster: Any, before: str, family: str, grown: int = 1, **labels: str) -> str:
    """Wait until ``family`` (with ``labels``) grew by ``grown`` since ``before``; the metrics."""
    start = counter(before, family, **labels)
    text: list[str] = [before]

    def grew() -> bool:
        text[0] = metrics(node_cluster)
        return counter(text[0], family, **labels) >= start + grown

    def now() -> str:
        return f"now {counter(text[0], family, **labels)}, was {start}"

    wait_for(grew, f"{family}{labels} to grow by {grown}", 30, 0.5, detail=now)
    return text[0]


def started(stacks: Stacks, name: str) -> int:
    """How many runs of the Stack were started (its UpdateStarted Events, counted)."""
    return sum(e.count or 1 for e in stacks.events(name) if e.reason == "UpdateStarted")


def dump(obj: Any) -> str:
    """``obj`` as JSON, for an assertion's message."""
    return json.dumps(obj, indent=1, default=str)
