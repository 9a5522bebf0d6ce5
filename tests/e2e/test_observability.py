"""What users read: kubectl columns and wait, Events, Prometheus metrics, idle silence."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest

from tests.e2e.conftest import Operator, Program, Stacks
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
    """PromQL on pulumi_stack_condition matches the API; a deleted Stack's series vanish."""
    stacks.create(stacks.manifest("watched", program))
    stacks.wait_ready("watched")
    scraper = prometheus(f"127.0.0.1:{operator.metrics_port}")
    query = 'pulumi_stack_condition{name="watched",type="Ready",status="True"}'
    assert [r["value"][1] for r in scraper.wait_for(query)] == ["1"]
    other = 'pulumi_stack_condition{name="watched",type="Ready",status!="True"}'
    assert {r["value"][1] for r in scraper.query(other)} == {"0"}
    lint = check_metrics(operator.metrics())
    assert lint.returncode == 0, lint.stdout + lint.stderr

    stacks.delete("watched")
    deadline = time.monotonic() + 60
    while sample(operator.metrics(), "pulumi_stack_condition", name="watched") is not None:
        assert time.monotonic() < deadline, "series of the deleted Stack still exported"
        time.sleep(0.5)
    time.sleep(3)  # two scrapes
    assert scraper.query(f"{query} == 1") == []


def test_idle_ready_stacks_cost_no_writes_and_no_events(
    stacks: Stacks, program: Program, operator: Operator
) -> None:
    """Five Ready Stacks, 10+ resyncs (2 s period): zero status writes, zero new Events."""
    names = [f"idle-{i}" for i in range(5)]
    for name in names:
        stacks.create(stacks.manifest(name, program, branch=None, commit=program.first))
    for name in names:
        stacks.wait_ready(name, timeout=240)
    time.sleep(3)  # let the last writes and events settle
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
