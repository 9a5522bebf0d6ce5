"""StackMetrics mirrors API state, counts transitions in lockstep, forgets deleted Stacks.

Status contract rules 23-25, 27 and 28 at the unit level; end to end in tests/e2e.
"""

from __future__ import annotations

import datetime
from typing import Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.parser import text_string_to_metric_families

from controller import tracing
from controller.cache import ObjectKey
from pulumi_stack_operator.telemetry import configure
from pulumi_stack_operator.wiring import RUNNER_VOCABULARY
from status import conditions as c
from status.conditions import Reason
from status.metrics import MetricsHandler, StackMetrics
from workspace.runner import InstallRecord

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
T1 = T0 + datetime.timedelta(minutes=1)


def stack(status: dict[str, Any], *, suspend: bool = False) -> dict[str, Any]:
    """A Stack object with ``status``."""
    return {
        "metadata": {"namespace": "ns", "name": "s"},
        "spec": {"suspend": suspend},
        "status": status,
    }


def condition(registry: CollectorRegistry, type_: str, status: str) -> float | None:
    """pulumi_stack_condition for ns/s."""
    labels = {"namespace": "ns", "name": "s", "type": type_, "status": status}
    return registry.get_sample_value("pulumi_stack_condition", labels)


def transitions(registry: CollectorRegistry, type_: str, status: str, reason: str) -> float | None:
    """pulumi_stack_condition_transitions_total for one label set."""
    labels = {"type": type_, "status": status, "reason": reason}
    return registry.get_sample_value("pulumi_stack_condition_transitions_total", labels)


def test_condition_gauge_has_exactly_one_current_status_per_type() -> None:
    """Ready Unknown + Reconciling True + absent Stalled read as one 1 per type."""
    registry = CollectorRegistry()
    metrics = StackMetrics(registry, RUNNER_VOCABULARY)
    metrics.observe(stack(c.progressing({}, 1, "go", T0)))
    assert [condition(registry, "Ready", s) for s in ("True", "False", "Unknown")] == [0, 0, 1]
    assert condition(registry, "Reconciling", "True") == 1
    assert condition(registry, "Stalled", "False") == 1


def test_transitions_count_status_flips_only() -> None:
    """A reason or message change is not a transition; a status flip is, once."""
    registry = CollectorRegistry()
    metrics = StackMetrics(registry, RUNNER_VOCABULARY)
    first = c.retrying({}, 1, Reason.UPDATE_FAILED, "a", "retry 1", T0)
    metrics.record_transitions({}, first)
    second = c.retrying(first, 1, Reason.UPDATE_FAILED, "b", "retry 2", T1)
    metrics.record_transitions(first, second)
    assert transitions(registry, "Ready", "False", "UpdateFailed") == 1
    third = c.succeeded(second, 1, "ok", T1)
    metrics.record_transitions(second, third)
    assert transitions(registry, "Ready", "True", "Succeeded") == 1
    assert transitions(registry, "Reconciling", "True", "ProgressingWithRetry") == 1


def test_transition_series_exist_at_zero_from_the_start() -> None:
    """rate() works from the first scrape: documented label sets are pre-created."""
    registry = CollectorRegistry()
    StackMetrics(registry, RUNNER_VOCABULARY)
    assert transitions(registry, "Stalled", "True", "InvalidSpec") == 0
    text = generate_latest(registry).decode()
    for name in (
        "pulumi_stack_condition ",
        "pulumi_stack_reconcile_duration_seconds",
        "pulumi_stack_update_duration_seconds",
        "pulumi_stack_resource_changes_total",
        "pulumi_stack_last_successful_update_timestamp_seconds",
        "pulumi_stack_suspended",
    ):
        assert f"# HELP {name.strip()}" in text


def test_deleting_a_stack_removes_its_series() -> None:
    """After on_delete no per-Stack series remain (not even zeros)."""
    registry = CollectorRegistry()
    metrics = StackMetrics(registry, RUNNER_VOCABULARY)
    handler = MetricsHandler(metrics)
    obj = stack(c.succeeded({}, 1, "ok", T0), suspend=True)
    handler.on_add(obj)
    assert (
        registry.get_sample_value("pulumi_stack_suspended", {"namespace": "ns", "name": "s"}) == 1
    )
    handler.on_delete(obj)
    assert 'name="s"' not in generate_latest(registry).decode()
    metrics.forget(ObjectKey("ns", "s"))  # twice is fine


def test_updates_record_duration_and_resource_changes() -> None:
    """observe_update feeds the histogram and the change counter."""
    registry = CollectorRegistry()
    metrics = StackMetrics(registry, RUNNER_VOCABULARY)
    metrics.observe_update("up", "succeeded", 3.0, {"create": 2, "same": 0})
    labels = {"operation": "up", "result": "succeeded"}
    assert registry.get_sample_value("pulumi_stack_update_duration_seconds_count", labels) == 1
    changes = {"operation": "up", "change": "create"}
    assert registry.get_sample_value("pulumi_stack_resource_changes_total", changes) == 2


def test_duration_histograms_reach_hours_and_count_each_observation_once() -> None:
    """Buckets run from under a second to 4 h (Pulumi runs are long); one call, one sample."""
    registry = CollectorRegistry()
    metrics = StackMetrics(registry, RUNNER_VOCABULARY)
    metrics.observe_reconcile("success", 5400.0)
    durations = ("pulumi_stack_reconcile_duration_seconds", "pulumi_stack_update_duration_seconds")
    histograms = [
        family
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        if family.type == "histogram" and family.name in durations
    ]
    assert len(histograms) == 2
    for family in histograms:
        bounds = sorted(float(s.labels["le"]) for s in family.samples if s.name.endswith("_bucket"))
        finite = [b for b in bounds if b != float("inf")]
        assert finite[0] <= 1, family.name
        assert finite[-1] >= 4 * 3600, family.name
    count = "pulumi_stack_reconcile_duration_seconds_count"
    assert registry.get_sample_value(count, {"result": "success"}) == 1
    assert registry.get_sample_value(count, {"result": "error"}) == 0


def test_per_stack_series_carry_only_bounded_labels() -> None:
    """Per-Stack series: namespace, name, type, status only; reason only without per-Stack labels.

    Every reason label value is one of ``Reason`` (a closed set), so cardinality is bounded.
    """
    registry = CollectorRegistry()
    metrics = StackMetrics(registry, RUNNER_VOCABULARY)
    status = c.stalled({}, 1, Reason.INVALID_SPEC, "spec.stack: not a stack name 'a b'", T0)
    metrics.observe(stack(status))
    metrics.record_transitions({}, status)
    metrics.observe_update("up", "failed", 1.0, {"create": 1})
    metrics.observe_reconcile("error", 0.1)
    per_stack = {"namespace", "name", "type", "status"}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            labels = set(sample.labels) - {"le"}
            if {"namespace", "name"} & labels:
                assert labels <= per_stack, (sample.name, labels)
            if "reason" in labels:
                assert not {"namespace", "name"} & labels, sample.name
                assert sample.labels["reason"] in {r.value for r in Reason}


def last_success(registry: CollectorRegistry) -> float | None:
    """pulumi_stack_last_successful_update_timestamp_seconds for ns/s."""
    name = "pulumi_stack_last_successful_update_timestamp_seconds"
    return registry.get_sample_value(name, {"namespace": "ns", "name": "s"})


def test_last_success_appears_with_the_first_success_and_outlives_a_failure() -> None:
    """No series before a success; its time after; a later failed update leaves it."""
    registry = CollectorRegistry()
    metrics = StackMetrics(registry, RUNNER_VOCABULARY)
    metrics.observe(stack(c.progressing({}, 1, "go", T0)))
    assert last_success(registry) is None
    ok = {"lastUpdate": {"state": "succeeded", "lastResyncTime": T0.isoformat()}}
    metrics.observe(stack(c.succeeded(ok, 1, "ok", T0)))
    assert last_success(registry) == T0.timestamp()

    failed = {"lastUpdate": {"state": "failed", "lastResyncTime": T1.isoformat()}}
    metrics.observe(stack(c.progressing(failed, 2, "retrying", T1)))

    assert last_success(registry) == T0.timestamp()
    assert condition(registry, "Ready", "Unknown") == 1


def test_a_restricted_scrape_of_one_family_gets_every_stacks_series() -> None:
    """``/metrics?name[]=pulumi_stack_condition`` (a restricted registry) sees the rows."""
    registry = CollectorRegistry()
    metrics = StackMetrics(registry, RUNNER_VOCABULARY)
    for name in ("a", "b"):
        obj = stack(c.succeeded({}, 1, "ok", T0))
        obj["metadata"]["name"] = name
        metrics.observe(obj)

    text = generate_latest(registry.restricted_registry(["pulumi_stack_condition"])).decode()

    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert list(families) == ["pulumi_stack_condition"]
    assert len(families["pulumi_stack_condition"].samples) == 2 * 9


def test_dependency_installs_count_hits_and_misses_and_time_the_misses() -> None:
    """A hit counts, a miss counts and is timed by result; the cache's bytes by trust domain."""
    registry = CollectorRegistry()
    metrics = StackMetrics(registry, RUNNER_VOCABULARY)
    for kind in ("nodejs", "python", "go", "plugins"):
        assert (
            registry.get_sample_value("pulumi_stack_dependency_cache_hits_total", {"kind": kind})
            == 0
        )
    steps = [
        InstallRecord("nodejs", "npm ci", hit=False, seconds=42.0),
        InstallRecord("plugins", "pulumi install", hit=True, seconds=0.01),
        InstallRecord(
            "python", "pip install -r requirements.txt", hit=False, seconds=3.0, succeeded=False
        ),
    ]
    metrics.observe_installs(steps, {"environments": 1000, "downloads": 20}, "team-a")
    metrics.observe_installs([steps[0]], {"environments": 2000}, "")
    value = registry.get_sample_value
    assert value("pulumi_stack_dependency_cache_misses_total", {"kind": "nodejs"}) == 2
    assert value("pulumi_stack_dependency_cache_hits_total", {"kind": "plugins"}) == 1
    assert value("pulumi_stack_dependency_cache_hits_total", {"kind": "nodejs"}) == 0
    count = "pulumi_stack_dependency_install_duration_seconds_count"
    assert value(count, {"kind": "nodejs", "result": "succeeded"}) == 2
    assert value(count, {"kind": "python", "result": "failed"}) == 1
    assert value(count, {"kind": "plugins", "result": "succeeded"}) == 0  # hits are not timed
    gauge = "pulumi_stack_dependency_cache_bytes"
    assert value(gauge, {"namespace": "team-a", "cache": "environments"}) == 1000
    assert value(gauge, {"namespace": "team-a", "cache": "downloads"}) == 20
    assert value(gauge, {"namespace": "", "cache": "environments"}) == 2000


def test_a_traced_durations_exemplar_is_its_trace_id() -> None:
    """Traced, each duration's exemplar names the trace (OpenMetrics); untraced, none."""
    registry = CollectorRegistry()
    metrics = StackMetrics(registry, RUNNER_VOCABULARY)
    metrics.observe_reconcile("success", 0.2)
    untraced = openmetrics.generate_latest(registry).decode()  # type: ignore[no-untyped-call]
    assert "trace_id" not in untraced
    on = configure({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, InMemorySpanExporter())
    tracing.install(on)
    try:
        with on.span("run"):
            trace_id = on.trace_id()
            metrics.observe_update("up", "succeeded", 3.0, {})
    finally:
        tracing.install(tracing.OFF)
        on.shutdown()
    text = openmetrics.generate_latest(registry).decode()  # type: ignore[no-untyped-call]
    assert f'# {{trace_id="{trace_id}"}} 3.0' in text
