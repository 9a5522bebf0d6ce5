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
import dataclasses
import datetime
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Metric
from prometheus_client.core import GaugeMetricFamily

from controller.cache import ObjectKey
from controller.tracing import tracing
from status.conditions import READY, RECONCILING, STALLED, Reason, get_condition

TYPES = (READY, RECONCILING, STALLED)
STATUSES = ("True", "False", "Unknown")
# Pulumi updates take seconds to hours.
DURATION_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400)
RECONCILE_RESULTS = ("success", "error", "requeue_after")
UPDATE_RESULTS = ("succeeded", "failed", "interrupted", "conflict")
OPERATIONS = ("up", "preview", "refresh", "destroy")
INSTALL_RESULTS = ("succeeded", "failed")
# Installs take seconds to tens of minutes.
INSTALL_BUCKETS = (0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800)


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """The runner's words the metrics are labelled by, given by whoever wires them.

    ``install_kinds``: what installs are counted by (the runtimes whose dependencies are
    installed, and the plugin step); ``caches``: the parts of the dependency cache whose
    bytes are kept (any other name a report gives is dropped: a run pod's report must
    not grow the label set); ``pod_failure_reasons``: the run pods' failure reasons that
    start at zero. Each family's common series exist from the start, at zero.
    """

    install_kinds: tuple[str, ...] = ()
    caches: tuple[str, ...] = ()
    pod_failure_reasons: tuple[str, ...] = ()


class StackMetrics:
    """The ``pulumi_stack_*`` families; see the module docstring."""

    def __init__(self, registry: CollectorRegistry, vocabulary: Vocabulary) -> None:
        """Register every family in ``registry``, labelled in the runner's ``vocabulary``."""
        self.series = StackSeries(registry)
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
        self.dependencies = DependencyMetrics(registry, vocabulary)
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
        statuses = tuple(_status_of(get_condition(status, type_)) for type_ in TYPES)
        suspended = bool((obj.get("spec") or {}).get("suspend"))
        self.series.set(key, _Row(statuses, suspended, self.series.last_success(key, status)))

    def forget(self, key: ObjectKey) -> None:
        """Remove every series of a deleted Stack."""
        self.series.drop(key)

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
        """Record one Pulumi operation's duration and resource changes.

        Traced, the duration carries the trace's id as its exemplar (OpenMetrics).
        """
        self.update_duration.labels(operation, result).observe(seconds, _exemplar())
        for change, count in changes.items():
            if count:
                self.resource_changes.labels(operation, change).inc(count)

    def observe_reconcile(self, result: str, seconds: float) -> None:
        """Record one reconcile's duration (with the trace's id as exemplar, when traced)."""
        self.reconcile_duration.labels(result).observe(seconds, _exemplar())

    def observe_installs(
        self, installs: Iterable[InstallStep], cache_bytes: Mapping[str, int], namespace: str
    ) -> None:
        """Record a run's dependency and plugin steps and its cache's size."""
        self.dependencies.observe(installs, cache_bytes, namespace)


class InstallStep(Protocol):
    """One dependency or plugin step of a run (``workspace.runner.InstallRecord``)."""

    @property
    def kind(self) -> str:
        """``nodejs``, ``python``, ``go`` or ``plugins``."""
        ...

    @property
    def hit(self) -> bool:
        """The cache had it: nothing was installed."""
        ...

    @property
    def seconds(self) -> float:
        """How long the install took (a hit's lookup)."""
        ...

    @property
    def succeeded(self) -> bool:
        """The install succeeded."""
        ...


class DependencyMetrics:
    """The ``pulumi_stack_dependency_*`` families: cache hits, misses, installs, bytes.

    A hit is a run that found its program's dependencies (or plugins) installed and ran
    nothing; a miss ran the tool, and its time is observed by result. The cache's bytes
    are by ``namespace``, the cache's trust domain: a namespace's cache volume with the
    pod runner, ``""`` for the local runner's one cache; set after each install.
    """

    def __init__(self, registry: CollectorRegistry, vocabulary: Vocabulary) -> None:
        """Register the families in ``registry``; the kinds' series start at zero."""
        self._caches = frozenset(vocabulary.caches)
        self.hits = Counter(
            "pulumi_stack_dependency_cache_hits",
            "Runs whose program's dependencies (or plugins) were found installed, by kind.",
            ["kind"],
            registry=registry,
        )
        self.misses = Counter(
            "pulumi_stack_dependency_cache_misses",
            "Runs that had to install their program's dependencies (or plugins), by kind.",
            ["kind"],
            registry=registry,
        )
        self.install_duration = Histogram(
            "pulumi_stack_dependency_install_duration_seconds",
            "Time one install of a program's dependencies (or plugins) took, by kind and result.",
            ["kind", "result"],
            buckets=INSTALL_BUCKETS,
            registry=registry,
        )
        self.cache_bytes = Gauge(
            "pulumi_stack_dependency_cache_bytes",
            "Bytes the dependency cache held after the last install, by trust domain and part.",
            ["namespace", "cache"],
            registry=registry,
        )
        for kind in vocabulary.install_kinds:
            self.hits.labels(kind)
            self.misses.labels(kind)
            for result in INSTALL_RESULTS:
                self.install_duration.labels(kind, result)

    def observe(
        self, installs: Iterable[InstallStep], cache_bytes: Mapping[str, int], namespace: str
    ) -> None:
        """Count each step as a hit or a miss, time the misses, set the cache's bytes."""
        for step in installs:
            if step.hit:
                self.hits.labels(step.kind).inc()
                continue
            self.misses.labels(step.kind).inc()
            result = "succeeded" if step.succeeded else "failed"
            self.install_duration.labels(step.kind, result).observe(step.seconds)
        for cache, size in cache_bytes.items():
            if cache in self._caches:
                self.cache_bytes.labels(namespace, cache).set(size)


class _Row(NamedTuple):
    """What the per-Stack families show for one Stack."""

    statuses: tuple[str, ...]  # of TYPES, each one of STATUSES (a missing condition: False)
    suspended: bool
    last_success: float | None  # Unix time; None before the first success


def _status_of(condition: Mapping[str, Any] | None) -> str:
    """The condition's status as one of the shared ``STATUSES`` strings (False if absent)."""
    value = str(condition.get("status")) if condition else "False"
    return next((s for s in STATUSES if s == value), value)


class StackSeries:
    """The per-Stack gauge families, kept as one small row per Stack, rendered at scrape.

    A labelled ``Gauge`` child costs about 0.7 KiB, and a Stack had eleven (nine condition
    series, suspended, last success): 8 KiB per Stack, more than its cached object. One
    row per Stack here, and the samples are made only when ``/metrics`` is read, from a
    copy of the rows taken under the lock. The families, their help, labels and values
    are those of ``pulumi_stack_condition``, ``pulumi_stack_suspended`` and
    ``pulumi_stack_last_successful_update_timestamp_seconds``.
    """

    CONDITION = (
        "pulumi_stack_condition",
        "1 for the current status of each condition of a Stack, 0 for the others.",
    )
    SUSPENDED = ("pulumi_stack_suspended", "1 while a Stack's spec.suspend is true, else 0.")
    LAST_SUCCESS = (
        "pulumi_stack_last_successful_update_timestamp_seconds",
        "Unix time of a Stack's last successful update.",
    )

    def __init__(self, registry: CollectorRegistry) -> None:
        """Start empty and register in ``registry``."""
        self._lock = threading.Lock()
        self._rows: dict[ObjectKey, _Row] = {}
        registry.register(self)

    def set(self, key: ObjectKey, row: _Row) -> None:
        """Show ``row`` for the Stack ``key``."""
        with self._lock:
            self._rows[key] = row

    def drop(self, key: ObjectKey) -> None:
        """Show nothing for the Stack ``key`` any more."""
        with self._lock:
            self._rows.pop(key, None)

    def last_success(self, key: ObjectKey, status: Mapping[str, Any]) -> float | None:
        """The last success ``status`` records, else the one shown so far (it only moves on)."""
        last = status.get("lastUpdate") or {}
        if last.get("state") == "succeeded" and last.get("lastResyncTime"):
            with contextlib.suppress(ValueError):
                return datetime.datetime.fromisoformat(str(last["lastResyncTime"])).timestamp()
        with self._lock:
            shown = self._rows.get(key)
        return shown.last_success if shown else None

    def describe(self) -> list[Metric]:
        """The three families, empty (so a restricted registry knows their names)."""
        return list(self._families([]))

    def collect(self) -> list[Metric]:
        """The three families with a sample per Stack (nine per Stack for conditions)."""
        with self._lock:
            rows = list(self._rows.items())
        return list(self._families(rows))

    def _families(self, rows: list[tuple[ObjectKey, _Row]]) -> Iterator[Metric]:
        labels = ["namespace", "name"]
        condition = GaugeMetricFamily(*self.CONDITION, labels=[*labels, "type", "status"])
        suspended = GaugeMetricFamily(*self.SUSPENDED, labels=labels)
        last_success = GaugeMetricFamily(*self.LAST_SUCCESS, labels=labels)
        for key, row in rows:
            ns, name = key.namespace, key.name
            for type_, current in zip(TYPES, row.statuses, strict=True):
                for value in STATUSES:
                    condition.add_metric([ns, name, type_, value], 1 if value == current else 0)
            suspended.add_metric([ns, name], 1 if row.suspended else 0)
            if row.last_success is not None:
                last_success.add_metric([ns, name], row.last_success)
        yield from (condition, suspended, last_success)


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


class RunPodMetrics:
    """The ``pulumi_stack_run_pod_*`` families of the pod runner (``--runner=pod``).

    ``reason`` is the pod's own (a closed set in practice: the kubelet's and the
    runner's reasons); the common ones start at zero.
    """

    def __init__(self, registry: CollectorRegistry, vocabulary: Vocabulary) -> None:
        """Register the families in ``registry``; the common reasons start at zero."""
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
        self.reused = Counter(
            "pulumi_stack_run_pods_reused",
            "Runs handed to a warm run pod (--run-pod-keep-warm) instead of a new one.",
            registry=registry,
        )
        self.idle = Gauge(
            "pulumi_stack_run_pods_idle",
            "Warm run pods (--run-pod-keep-warm) that have reported their run and wait for "
            "their Stack's next one.",
            registry=registry,
        )
        for reason in vocabulary.pod_failure_reasons:
            self.failed.labels(reason)

    def pod_created(self) -> None:
        """One run pod was created."""
        self.created.inc()

    def pod_reused(self) -> None:
        """One run was handed to a warm run pod instead of a new one."""
        self.reused.inc()

    def idle_pods(self, count: int) -> None:
        """``count`` warm run pods are idle now."""
        self.idle.set(count)

    def pod_failed(self, reason: str) -> None:
        """One run ended without an outcome for ``reason``."""
        self.failed.labels(reason).inc()

    def pod_started(self, seconds: float) -> None:
        """A run pod's container started ``seconds`` after the pod was created."""
        self.start_latency.observe(seconds)

    def spec_to_running(self, seconds: float) -> None:
        """A run pod for a spec change ran ``seconds`` after the change was written."""
        self.spec_latency.observe(seconds)


def _exemplar() -> dict[str, str] | None:
    """``{"trace_id": …}`` of the current trace, for an observation's exemplar; None untraced."""
    trace_id = tracing().trace_id()
    return {"trace_id": trace_id} if trace_id is not None else None
