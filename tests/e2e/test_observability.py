"""What users read: kubectl columns and wait, Events, Prometheus metrics, idle silence."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from testbed.control_plane import ControlPlane
from testbed.prometheus import Prometheus, check_metrics
from testbed.waits import wait_for
from tests.e2e.agreement import api_states
from tests.e2e.conftest import Operator, Program, Stacks
from tests.e2e.waits import wait_reconciles
from tests.test_docs import CODE, METRICS, section, table

pytestmark = [pytest.mark.e2e, pytest.mark.pulumi, pytest.mark.integration]


def sample(text: str, metric: str, **labels: str) -> float | None:
    """The value of one sample in a Prometheus text exposition."""
    for line in text.splitlines():
        if not line.startswith(metric + "{") and not line.startswith(metric + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_kubectl_wait_get_and_describe(
    control_plane: ControlPlane, stacks: Stacks, program: Program, operator: Operator
) -> None:
    """Kubectl wait returns on Ready, times out on Stalled; get and describe show the truth."""
    del operator
    ns = f"--namespace={stacks.namespace}"
    stacks.create(stacks.manifest("shown", program))
    waited = control_plane.kubectl(
        "wait", ns, "--for=condition=Ready", "--timeout=120s", "stack/shown"
    )
    assert "condition met" in waited.stdout
    table = control_plane.kubectl("get", "stacks", ns).stdout.splitlines()
    assert re.split(r"\s{2,}", table[0].strip()) == [
        "NAME",
        "READY",
        "REASON",
        "LAST UPDATE",
        "COMMIT",
        "AGE",
    ]
    assert re.split(r"\s{2,}", table[1].strip())[:5] == [
        "shown",
        "True",
        "Succeeded",
        "succeeded",
        program.first[:7],
    ]
    wide = control_plane.kubectl("get", "stacks", ns, "-o", "wide").stdout.splitlines()[0]
    for column in (
        "STACK",
        "RECONCILING",
        "STALLED",
        "SUSPENDED",
        "OBSERVED",
        "GENERATION",
        "MESSAGE",
    ):
        assert column in wide
    stacks.wait_events("shown", "UpdateStarted", "Succeeded")
    described = control_plane.kubectl("describe", "stack", ns, "shown").stdout
    events = described[described.index("Events:") :]
    assert events.index("UpdateStarted") < events.index("Succeeded")

    stacks.create(
        stacks.manifest(
            "stuck", program, envRefs={"X": {"type": "FS", "filesystem": {"path": "/etc/passwd"}}}
        )
    )
    stacks.wait_reason("stuck", "Stalled", "InvalidSpec")
    timed_out = control_plane.kubectl(
        "wait", ns, "--for=condition=Ready", "--timeout=5s", "stack/stuck", check=False
    )
    assert timed_out.returncode != 0
    assert "timed out" in timed_out.stderr


def test_prometheus_sees_the_conditions_and_loses_them_on_delete(
    stacks: Stacks,
    program: Program,
    operator: Operator,
    prometheus: Callable[[str], Prometheus],
) -> None:
    """PromQL agrees with the API for every Stack; documented metrics exist; deletes clean up.

    Three Stacks (Ready, Stalled, waiting): ``pulumi_stack_condition == 1`` in Prometheus
    names exactly the status each condition has in the API (status contract rule 23).
    Every metric ``docs/metrics.md`` documents is exported with its documented labels and
    nothing else is (status contract rule 26). A deleted Stack's series vanish (status contract
    rule 25).
    """
    stacks.create(stacks.manifest("watched", program))
    stacks.create(stacks.manifest("broken", program, envRefs={"X": {"type": "Env"}}))
    stacks.create(stacks.manifest("blocked", program, prerequisites=[{"name": "absent"}]))
    stacks.wait_ready("watched")
    stacks.wait_reason("broken", "Stalled", "InvalidSpec")
    stacks.wait_reason("blocked", "Reconciling", "DependencyNotReady")
    scraper = prometheus(f"127.0.0.1:{operator.metrics_port}")
    shown = api_states(stacks.get(n) for n in ("watched", "broken", "blocked"))

    def scraped() -> dict[tuple[str, str], list[str]]:
        ones = scraper.query(f'pulumi_stack_condition{{namespace="{stacks.namespace}"}} == 1')
        found: dict[tuple[str, str], list[str]] = {}
        for series in ones:
            labels = series["metric"]
            found.setdefault((labels["name"], labels["type"]), []).append(labels["status"])
        return found

    wait_for(lambda: scraped() == shown, "Prometheus to scrape what the API shows", 30)
    assert len(shown) == 9  # three Stacks, three types each
    lint = check_metrics(operator.metrics())
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert_documented_metrics_exported(operator.metrics())

    stacks.delete("watched")

    def unexported() -> bool:
        return sample(operator.metrics(), "pulumi_stack_condition", name="watched") is None

    wait_for(unexported, "the deleted Stack's series to leave /metrics", 60)
    gone = 'pulumi_stack_condition{name="watched"}'
    wait_for(lambda: scraper.query(gone) == [], "Prometheus to drop the deleted Stack", 60)


def documented_metrics() -> dict[str, set[str]]:
    """Metric name -> label names, from docs/metrics.md's tables (status contract rule 26)."""
    documented: dict[str, set[str]] = {}
    for heading in ("## Stack metrics", "## Controller metrics"):
        for row in table(section(METRICS, heading), "| metric | type | labels"):
            labels = set(CODE.findall(re.sub(r"\([^)]*\)", "", row[2])))
            for name in CODE.findall(row[0]):
                documented[name] = labels
    return documented


def exported_metrics(text: str) -> dict[str, set[str]]:
    """Metric name (counters with _total) -> label names, from a /metrics exposition."""
    exported: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        if family.name.startswith(("process_", "python_", "platform_")):
            continue  # the client library's standard collectors
        name = family.name + ("_total" if family.type == "counter" else "")
        labels = {k for sample in family.samples for k in sample.labels if k != "le"}
        exported[name] = labels
    return exported


def assert_documented_metrics_exported(text: str) -> None:
    """docs/metrics.md's tables and the exported families agree, names and labels."""
    documented, exported = documented_metrics(), exported_metrics(text)
    assert set(documented) == set(exported), (
        f"undocumented: {set(exported) - set(documented)}; "
        f"not exported: {set(documented) - set(exported)}"
    )
    for name, labels in documented.items():
        if not exported[name]:
            continue  # no series yet (a gauge set only after an install): no labels to see
        assert exported[name] == labels, f"{name}: documented {labels}, exported {exported[name]}"


def event_counts(stacks: Stacks) -> dict[tuple[str, str], int]:
    """(Stack, reason) -> the summed ``count`` of the namespace's Events about it."""
    counts: dict[tuple[str, str], int] = {}
    for event in stacks.core.list_namespaced_event(stacks.namespace).items:
        key = (str(event.involved_object.name), str(event.reason))
        counts[key] = counts.get(key, 0) + (event.count or 1)
    return counts


def test_idle_ready_stacks_cost_no_writes_and_no_events(
    stacks: Stacks, program: Program, operator: Operator
) -> None:
    """Five Ready Stacks, 10 resyncs (2 s period): zero status writes, zero new Events.

    Status writes happen inside reconciles, so once the resyncs' reconciles have ended
    their writes show. Events are posted by one thread in the order they were recorded:
    the positive control is a sixth Stack's Event, recorded after those reconciles, which
    must be posted after any Event they recorded.
    """
    names = [f"idle-{i}" for i in range(5)]
    for name in names:
        stacks.create(stacks.manifest(name, program, branch=None, commit=program.first))
    for name in names:
        stacks.wait_ready(name, timeout=240)
        stacks.wait_events(name, "UpdateStarted", "Succeeded")
    wait_reconciles(operator, len(names))  # the runs' reconciles have ended: writes counted
    versions = {n: stacks.get(n)["metadata"]["resourceVersion"] for n in names}
    events = event_counts(stacks)
    writes = sample(operator.metrics(), "pulumi_stack_status_patches_total", result="written")
    wait_reconciles(operator, len(names) * 10, timeout=120)
    assert {n: stacks.get(n)["metadata"]["resourceVersion"] for n in names} == versions
    assert (
        sample(operator.metrics(), "pulumi_stack_status_patches_total", result="written") == writes
    )
    stacks.create(stacks.manifest("marker", program, envRefs={"X": {"type": "Env"}}))
    stacks.wait_events("marker", "InvalidSpec")
    after = {key: count for key, count in event_counts(stacks).items() if key[0] != "marker"}
    assert after == events
