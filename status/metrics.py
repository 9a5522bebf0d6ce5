"""Prometheus metrics about Stacks: conditions, transitions, durations, changes.

Two sources feed them, each the truth for its part:

- what the API shows: ``observe(obj)`` runs on every informer add/update of a Stack, so
  ``pulumi_stack_condition`` always equals the conditions ``kubectl get -o json`` shows
  (absent ``Reconciling``/``Stalled`` read as ``False``), and ``forget(key)`` on delete
  removes every per-Stack series (no stale zeros);
- what this operator did: ``record_transitions`` runs after each status write the
  operator makes, and counts a transition exactly when a condition's
  ``lastTransitionTime`` changed (it appeared, or its status flipped) — never on a reason
  or message change alone; ``observe_update`` and ``observe_reconcile`` time the work.

Per-Stack series carry only ``namespace`` and ``name`` (and condition ``type``/``status``);
``reason`` appears only on the transition counter, which has no per-Stack labels — it is a
closed set (``status.conditions.Reason``), so cardinality stays bounded. Every family is
registered when the operator starts; the transition counter and the result-labelled
series start at zero so that ``rate()`` works from the first scrape. Status contract rules
23-28 (``docs/status-contract.md``).
"""

from __future__ import annotations

import contextlib
import datetime
import threading
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from controller.cache import ObjectKey
from status.conditions import READY, RECONCILING, STALLED, Reason, get_condition

TYPES = (READY, RECONCILING, STALLED)
STATUSES = ("True", "False", "Unknown")
# Pulumi updates take seconds to hours.
DURATION_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400)
RECONCILE_RESULTS = ("success", "error", "requeue_after")
UPDATE_RESULTS = ("succeeded", "failed", "interrupted", "conflict")
OPERATIONS = ("up", "preview", "refresh", "destroy")


class StackMetrics:
    """The ``pulumi_stack_*`` families; see the module docstring."""

    def __init__(self, registry: CollectorRegistry) -> None:
        """Register every family in ``registry``."""
        self.condition = Gauge(
            "pulumi_stack_condition",
            "1 for the current status of each condition of a Stack, 0 for the others.",
            ["namespace", "name", "type", "status"],
            registry=registry,
        )
        self.transitions = Counter(
            "pulumi_stack_condition_transitions",
            "Condition status changes written by the operator (in lockstep with "
            "lastTransitionTime), by the new status and its reason.",
            ["type", "status", "reason"],
            registry=registry,
        )
        self.reconcile_duration = Histogram(
            "pulumi_stack_reconcile_duration_seconds",
            "Time spent in one reconcile of a Stack, by result.",
            ["result"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.update_duration = Histogram(
            "pulumi_stack_update_duration_seconds",
            "Duration of Pulumi operations, by operation and result.",
            ["operation", "result"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.resource_changes = Counter(
            "pulumi_stack_resource_changes",
            "Resource changes reported by Pulumi operations, by operation and change.",
            ["operation", "change"],
            registry=registry,
        )
        self.last_success = Gauge(
            "pulumi_stack_last_successful_update_timestamp_seconds",
            "Unix time of a Stack's last successful update.",
            ["namespace", "name"],
            registry=registry,
        )
        self.suspended = Gauge(
            "pulumi_stack_suspended",
            "1 while a Stack's spec.suspend is true, else 0.",
            ["namespace", "name"],
            registry=registry,
        )
        self._lock = threading.Lock()
        self._known: set[ObjectKey] = set()
        self._zero()

    def _zero(self) -> None:
        for reason in Reason:
            for status in STATUSES:
                self.transitions.labels(READY, status, reason)
            self.transitions.labels(RECONCILING, "True", reason)
            self.transitions.labels(STALLED, "True", reason)
        for result in RECONCILE_RESULTS:
            self.reconcile_duration.labels(result)
        for operation in OPERATIONS:
            for result in UPDATE_RESULTS:
                self.update_duration.labels(operation, result)

    # -- what the API shows -----------------------------------------------------------

    def observe(self, obj: Mapping[str, Any]) -> None:
        """Set a Stack's per-object series from its current state in the API."""
        key = ObjectKey.of(obj)
        status = obj.get("status") or {}
        for type_ in TYPES:
            condition = get_condition(status, type_)
            current = str(condition.get("status")) if condition else "False"
            for value in STATUSES:
                self.condition.labels(key.namespace, key.name, type_, value).set(
                    1 if value == current else 0
                )
        suspended = bool((obj.get("spec") or {}).get("suspend"))
        self.suspended.labels(key.namespace, key.name).set(1 if suspended else 0)
        self._observe_last_success(key, status)
        with self._lock:
            self._known.add(key)

    def _observe_last_success(self, key: ObjectKey, status: Mapping[str, Any]) -> None:
        last = status.get("lastUpdate") or {}
        if last.get("state") != "succeeded" or not last.get("lastResyncTime"):
            return
        try:
            when = datetime.datetime.fromisoformat(str(last["lastResyncTime"]))
        except ValueError:
            return
        self.last_success.labels(key.namespace, key.name).set(when.timestamp())

    def forget(self, key: ObjectKey) -> None:
        """Remove every series of a deleted Stack."""
        with self._lock:
            self._known.discard(key)
        for type_ in TYPES:
            for value in STATUSES:
                _remove(self.condition, key.namespace, key.name, type_, value)
        _remove(self.suspended, key.namespace, key.name)
        _remove(self.last_success, key.namespace, key.name)

    # -- what the operator did --------------------------------------------------------

    def record_transitions(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        """Count each condition whose lastTransitionTime moved between two written statuses."""
        for type_ in TYPES:
            before, after = get_condition(old, type_), get_condition(new, type_)
            if after is None:
                continue
            if before is None or before.get("status") != after.get("status"):
                self.transitions.labels(type_, after["status"], after["reason"]).inc()

    def observe_update(
        self,
        operation: str,
        result: str,
        seconds: float,
        changes: Mapping[str, int],
    ) -> None:
        """Record one Pulumi operation's duration and resource changes."""
        self.update_duration.labels(operation, result).observe(seconds)
        for change, count in changes.items():
            if count:
                self.resource_changes.labels(operation, change).inc(count)

    def observe_reconcile(self, result: str, seconds: float) -> None:
        """Record one reconcile's duration."""
        self.reconcile_duration.labels(result).observe(seconds)


def _remove(metric: Gauge, *labels: str) -> None:
    with contextlib.suppress(KeyError):  # never set
        metric.remove(*labels)


class MetricsHandler:
    """An informer event handler keeping ``StackMetrics`` equal to the API's state."""

    def __init__(self, metrics: StackMetrics) -> None:
        """Feed ``metrics``."""
        self._metrics = metrics

    def on_add(self, obj: Mapping[str, Any]) -> None:
        """A Stack appeared."""
        self._metrics.observe(obj)

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        """A Stack changed (or a resync replayed it)."""
        del old
        self._metrics.observe(new)

    def on_delete(self, obj: object) -> None:
        """A Stack is gone: drop its series."""
        key = getattr(obj, "key", None)
        if key is None and isinstance(obj, Mapping):
            key = ObjectKey.of(obj)
        if isinstance(key, ObjectKey):
            self._metrics.forget(key)


START_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
POD_FAILURE_REASONS = (
    "Deleted",
    "Evicted",
    "OOMKilled",
    "DeadlineExceeded",
    "Error",
    "NotStarted",
    "ImagePullBackOff",
    "ErrImagePull",
    "CreateContainerConfigError",
)


class RunPodMetrics:
    """The ``pulumi_stack_run_pod_*`` families of the pod runner (``--runner=pod``).

    ``reason`` is the pod's own (a closed set in practice: the kubelet's and the
    runner's reasons); the common ones start at zero.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        """Register the families in ``registry``."""
        self.created = Counter(
            "pulumi_stack_run_pods_created",
            "Run pods the operator created (one per Pulumi operation).",
            registry=registry,
        )
        self.failed = Counter(
            "pulumi_stack_run_pods_failed",
            "Runs whose pod ended without an outcome or could not start, by the pod's reason.",
            ["reason"],
            registry=registry,
        )
        self.start_latency = Histogram(
            "pulumi_stack_run_pod_start_seconds",
            "Time from a run pod's creation to its container running (scheduling, image, volumes).",
            buckets=START_BUCKETS,
            registry=registry,
        )
        self.spec_latency = Histogram(
            "pulumi_stack_run_pod_spec_to_running_seconds",
            "Time from a Stack's spec change (its write, seconds precision) to the run pod "
            "for it running.",
            buckets=START_BUCKETS,
            registry=registry,
        )
        for reason in POD_FAILURE_REASONS:
            self.failed.labels(reason)

    def pod_created(self) -> None:
        """One run pod was created."""
        self.created.inc()

    def pod_failed(self, reason: str) -> None:
        """One run ended without an outcome for ``reason``."""
        self.failed.labels(reason).inc()

    def pod_started(self, seconds: float) -> None:
        """A run pod's container started ``seconds`` after the pod was created."""
        self.start_latency.observe(seconds)

    def spec_to_running(self, seconds: float) -> None:
        """A run pod for a spec change ran ``seconds`` after the change was written."""
        self.spec_latency.observe(seconds)
