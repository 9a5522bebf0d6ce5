"""What users read: kubectl columns and wait, Events, Prometheus metrics, idle silence."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.agreement import api_states
from tests.e2e.conftest import Operator, Program, Stacks
from tests.test_readme import CODE, section, table
from tests.testbed.control_plane import ControlPlane
from tests.testbed.prometheus import Prometheus, check_metrics

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
    names exactly the status each condition has in the API (G23). Every metric the README
    documents is exported with its documented labels and nothing else is (G26). A deleted
    Stack's series vanish (G25).
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

    deadline = time.monotonic() + 30
    while scraped() != shown and time.monotonic() < deadline:
        time.sleep(0.5)
    assert scraped() == shown
    assert len(shown) == 9  # three Stacks, three types each
    lint = check_metrics(operator.metrics())
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert_documented_metrics_exported(operator.metrics())

    stacks.delete("watched")
    deadline = time.monotonic() + 60
    while sample(operator.metrics(), "pulumi_stack_condition", name="watched") is not None:
        assert time.monotonic() < deadline, "series of the deleted Stack still exported"
        time.sleep(0.5)
    while scraper.query('pulumi_stack_condition{name="watched"}') != []:
        assert time.monotonic() < deadline, "Prometheus still has the deleted Stack's series"
        time.sleep(0.5)


def documented_metrics() -> dict[str, set[str]]:
    """Metric name -> label names, from the README's two metrics tables (G26)."""
    documented: dict[str, set[str]] = {}
    for heading in ("### Stack metrics", "### Controller metrics"):
        for row in table(section(heading), "| metric | type | labels"):
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
    """The README's metrics tables and the exported families agree, names and labels."""
    documented, exported = documented_metrics(), exported_metrics(text)
    assert set(documented) == set(exported), (
        f"undocumented: {set(exported) - set(documented)}; "
        f"not exported: {set(documented) - set(exported)}"
    )
    for name, labels in documented.items():
        assert exported[name] == labels, f"{name}: documented {labels}, exported {exported[name]}"


def test_idle_ready_stacks_cost_no_writes_and_no_events(
    stacks: Stacks, program: Program, operator: Operator
) -> None:
    """Five Ready Stacks, 10+ resyncs (2 s period): zero status writes, zero new Events."""
    names = [f"idle-{i}" for i in range(5)]
    for name in names:
        stacks.create(stacks.manifest(name, program, branch=None, commit=program.first))
    for name in names:
        stacks.wait_ready(name, timeout=240)
        stacks.wait_events(name, "UpdateStarted", "Succeeded")
    time.sleep(3)  # let the last writes settle
    versions = {n: stacks.get(n)["metadata"]["resourceVersion"] for n in names}
    events = len(stacks.core.list_namespaced_event(stacks.namespace).items)
    writes = sample(operator.metrics(), "pulumi_stack_status_patches_total", result="written")
    time.sleep(22)
    assert {n: stacks.get(n)["metadata"]["resourceVersion"] for n in names} == versions
    assert len(stacks.core.list_namespaced_event(stacks.namespace).items) == events
    assert (
        sample(operator.metrics(), "pulumi_stack_status_patches_total", result="written") == writes
    )
    reconciles = (
        sample(operator.metrics(), "controller_runtime_reconcile_total", result="success") or 0
    )
    reconciles += (
        sample(operator.metrics(), "controller_runtime_reconcile_total", result="requeue_after")
        or 0
    )
    assert reconciles >= 5 * 10, "the resyncs did happen"
