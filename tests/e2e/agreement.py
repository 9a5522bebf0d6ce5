"""End-to-end agreement checks: metrics against the API and the watcher, Events' validity.

- Status contract rule 23: for every Stack and condition type, exactly one
  ``pulumi_stack_condition`` series is 1 and its ``status`` label is what the API shows
  (an absent Reconciling or Stalled reads as ``False``).
- Status contract rule 24: ``pulumi_stack_condition_transitions_total`` moved exactly as
  often as the watcher saw a condition appear or change status (``lastTransitionTime``
  moving), per (type, status, reason), over the operator process's lifetime.
- Status contract rule 21: every Event is well formed (type, CamelCase reason, lengths,
  reporting fields, a full involved object in the Event's own namespace).
- Status contract rule 19: every Warning Event's reason is a Ready or Stalled reason its
  Stack showed.

The operator writes, then its informer sees the write, then the gauge moves; the watcher
sees the write at about the same time. So the metric checks poll until both sides agree
(or time out and show the difference); they must be run while nothing else changes the
Stacks.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from testbed.waits import wait_for
from tests.status.invariants import StackWatcher

TYPES = ("Ready", "Reconciling", "Stalled")
ABSENT_MEANS_FALSE = ("Reconciling", "Stalled")
CAMEL_CASE = re.compile(r"[A-Z][A-Za-z0-9]*")
MAX_REASON = MAX_ACTION = MAX_INSTANCE = 128
MAX_MESSAGE = 1024

Flips = collections.Counter[tuple[str, str, str]]


def gauge_states(metrics: str, namespace: str) -> dict[tuple[str, str], list[str]]:
    """(name, type) -> the ``status`` labels whose ``pulumi_stack_condition`` series is 1."""
    states: dict[tuple[str, str], list[str]] = {}
    for family in text_string_to_metric_families(metrics):
        if family.name != "pulumi_stack_condition":
            continue
        for sample in family.samples:
            labels = sample.labels
            if labels["namespace"] != namespace:
                continue
            ones = states.setdefault((labels["name"], labels["type"]), [])
            if sample.value == 1:
                ones.append(labels["status"])
    return states


def api_states(stacks: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], list[str]]:
    """(name, type) -> [status] as the API shows it, in the gauge's terms."""
    states: dict[tuple[str, str], list[str]] = {}
    for obj in stacks:
        name = obj["metadata"]["name"]
        shown = {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions", [])}
        if not shown:
            continue  # never written: the operator has no opinion yet
        for type_ in TYPES:
            if type_ in shown:
                states[(name, type_)] = [shown[type_]]
            elif type_ in ABSENT_MEANS_FALSE:
                states[(name, type_)] = ["False"]
    return states


def transition_counts(metrics: str) -> Flips:
    """(type, status, reason) -> value of the operator's transition counter (non-zero only)."""
    counts: Flips = collections.Counter()
    for family in text_string_to_metric_families(metrics):
        if family.name != "pulumi_stack_condition_transitions":
            continue
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.value:
                labels = sample.labels
                counts[(labels["type"], labels["status"], labels["reason"])] = int(sample.value)
    return counts


def assert_metrics_agree(
    metrics: Callable[[], str],
    stacks: Callable[[], list[dict[str, Any]]],
    namespace: str,
    watcher: StackWatcher,
    since: float,
    timeout: float = 20.0,
) -> None:
    """Status contract rules 23 and 24, polled until /metrics, the API and the watcher agree.

    ``since``: when the operator process was started (monotonic), so the watcher counts
    only the flips that process wrote.
    """
    problems: list[str] = []

    def agreed() -> bool:
        text = metrics()
        gauges, shown = gauge_states(text, namespace), api_states(stacks())
        counted, seen = transition_counts(text), watcher.transitions(since)
        problems[:] = disagreements(text, (gauges, shown), (counted, seen))
        return not problems

    wait_for(
        agreed,
        "/metrics, the API and the watcher to agree",
        timeout,
        interval=0.5,
        detail=lambda: "; ".join(problems),
    )


def disagreements(
    text: str,
    conditions: tuple[Mapping[Any, Any], Mapping[Any, Any]],
    transitions: tuple[Mapping[Any, int], Mapping[Any, int]],
) -> list[str]:
    """What keeps /metrics (``text``), the API and the watcher apart; empty when they agree.

    ``conditions``: the condition gauges and the API's conditions; ``transitions``: the
    transitions counter and the flips the watcher saw.
    """
    if not text:
        return ["the operator's /metrics could not be read"]
    (gauges, shown), (counted, seen) = conditions, transitions
    found = []
    if gauges != shown:
        found.append(
            f"status contract rule 23: pulumi_stack_condition {gauges} but the API shows {shown}"
        )
    if counted != seen:
        found.append(
            f"status contract rule 24: transitions counter {dict(counted)} "
            f"but the watcher saw {dict(seen)}"
        )
    return found


def event_problems(event: Any) -> list[str]:
    """What is wrong with a core/v1 Event (status contract rule 21); empty when it is valid."""
    problems = []
    if event.type not in ("Normal", "Warning"):
        problems.append(f"type {event.type!r}")
    if not CAMEL_CASE.fullmatch(event.reason or "") or len(event.reason) > MAX_REASON:
        problems.append(f"reason {event.reason!r}")
    if len(event.message or "") > MAX_MESSAGE:
        problems.append(f"message of {len(event.message)} characters")
    if not event.reporting_component:
        problems.append("no reportingComponent")
    if not event.reporting_instance or len(event.reporting_instance) > MAX_INSTANCE:
        problems.append(f"reportingInstance {event.reporting_instance!r}")
    if not event.action or len(event.action) > MAX_ACTION:
        problems.append(f"action {event.action!r}")
    regarding = event.involved_object
    if not regarding.uid or not regarding.resource_version:
        problems.append("involvedObject without uid or resourceVersion")
    if regarding.namespace != event.metadata.namespace:
        problems.append(f"involvedObject in {regarding.namespace}, Event in another namespace")
    return problems


def assert_events_valid(events: Iterable[Any]) -> None:
    """Status contract rule 21 on every Event given."""
    bad = {
        f"{e.metadata.name} ({e.reason})": problems
        for e in events
        if (problems := event_problems(e))
    }
    assert not bad, f"status contract rule 21: malformed Events: {bad}"


def assert_warnings_match_conditions(events: Iterable[Any], watcher: StackWatcher) -> None:
    """Status contract rule 19: each Warning's reason is a Ready or Stalled reason shown.

    ``events``: the namespace's Events; each Warning about a Stack is checked against
    every version of that Stack the watcher saw.
    """
    for event in events:
        if event.type != "Warning" or event.involved_object.kind != "Stack":
            continue
        name = str(event.involved_object.name)
        shown = {
            condition["reason"]
            for seen in watcher.observations(name)
            for condition in (seen.obj.get("status") or {}).get("conditions", [])
            if condition["type"] in ("Ready", "Stalled")
        }
        assert event.reason in shown, (
            f"status contract rule 19: Warning {event.reason} on {name}; conditions showed {shown}"
        )


def forbidden(metrics: str) -> dict[str, float]:
    """``rest_client_requests_total`` samples with code 401 or 403 (non-zero), by method."""
    refused: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics):
        if family.name != "rest_client_requests":
            continue
        for sample in family.samples:
            if sample.labels.get("code") in ("401", "403") and sample.value:
                key = f"{sample.labels.get('method')} {sample.labels['code']}"
                refused[key] = sample.value
    return refused
