"""Every run as one OpenTelemetry trace, the Pulumi engine's spans inside, sent to a real Collector.

The operator runs with ``OTEL_EXPORTER_OTLP_ENDPOINT`` (under the agent runner: the
``--otel-endpoint`` flag's variable) naming the test bed's Collector
(``testbed.otel_collector``: OTLP/gRPC in, every span to a file). One Stack runs once; then:

- its run is one ``run`` span, under the ``reconcile`` span that found it due, with
  ``checkout``, ``operate`` and ``conclude`` inside, attributed with the Stack's namespace
  (``k8s.namespace.name``), name, generation, commit and operation;
- the Pulumi CLI's own spans (service ``pulumi-cli``: the engine, its plugins and steps)
  are in the same trace, the CLI's root span a child of ``operate``;
- no secret (the passphrase, a secret config value) is in any span's name, attributes or
  events, the CLI's included;
- under the pod runner, the run pod's legs (scheduling, checkout, start, agent), from the
  pod's own timestamps, are under ``operate`` too;
- the update's duration histogram has the trace's id as its exemplar (OpenMetrics);
- the Stack leads to its trace: ``status.lastUpdate.traceId`` and the run's Events
  (``UpdateStarted``, ``Succeeded``) name it.

Without the variables nothing is exported: the operator stops (a tracing operator flushes
what it holds when it stops), the Collector stops (it flushes too), and its file is empty.
Under the agent runner the CLI runs in the run's agent (the run pod's, as a process here),
which gets the context through the job; under the pod runner (on the node) the agent in the
run pod does, and its CLI sends its spans to the Collector on the host end of the node's
network, the address the node's pods reach (as they would reach an in-cluster Service).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.assets import find_built
from testbed.otel_collector import OtelCollector, Span
from testbed.waits import wait_for
from tests.e2e.beds import RUNNERS, Bed
from tests.e2e.conftest import Operator, Program, Sentinels, Stacks

pytestmark = [pytest.mark.e2e, pytest.mark.pulumi, pytest.mark.integration]

SECRET = {"token": {"type": "Secret", "secret": {"name": "app", "key": "token"}}}


@pytest.fixture
def otel_collector(
    bed: Bed, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[OtelCollector]:
    """The Collector where the runs reach it: loopback, or the node's host end for pods."""
    host = request.getfixturevalue("node_cluster").host_ip if bed.on_node else "127.0.0.1"
    with OtelCollector(find_built("otel"), tmp_path / "otelcol", host=host) as collector:
        yield collector


@pytest.fixture
def operator_env(bed: Bed, otel_collector: OtelCollector) -> dict[str, str]:
    """The Collector as the operator's OTLP endpoint; batches sent every 100 ms.

    Under the agent runner through ``--otel-endpoint``'s variable (``PSO_OTEL_ENDPOINT``),
    so that the flag is proven to turn tracing on as the ``OTEL_*`` variable does.
    """
    name = "PSO_OTEL_ENDPOINT" if bed.runner == "agent" else "OTEL_EXPORTER_OTLP_ENDPOINT"
    return {name: otel_collector.grpc_endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}


def traced_run(spans: list[Span], name: str) -> list[Span]:
    """The spans of the one trace holding the ``run`` span of Stack ``name`` (else [])."""
    runs = [s for s in spans if s.name == "run" and s.attributes.get(STACK) == name]
    if not runs:
        return []
    return [s for s in spans if s.trace_id == runs[0].trace_id]


STACK = "pulumi_stack_operator.stack"


def cli_root(trace: list[Span]) -> Span | None:
    """The Pulumi CLI's root span of ``trace``, once it has arrived."""
    found = [s for s in trace if s.service == "pulumi-cli" and s.name == "pulumi"]
    return found[0] if found else None


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_run_is_one_trace_with_the_engines_spans_inside(
    bed: Bed,
    otel_collector: OtelCollector,
    stacks: Stacks,
    program: Program,
    operator: Operator,
    sentinels: Sentinels,
) -> None:
    """Reconcile > run > checkout, operate > the CLI's spans, conclude; no secret anywhere."""
    stacks.secret("app", {"token": sentinels.secret_config})
    stacks.create(stacks.manifest("traced", program, secretsRef=SECRET))
    ready = stacks.wait_ready("traced", timeout=120)

    def arrived() -> list[Span]:
        trace = traced_run(otel_collector.spans(), "traced")
        return trace if cli_root(trace) is not None else []

    trace = wait_for(arrived, "the run's trace, with the CLI's spans", 60)
    by_name = {s.name: s for s in trace if s.service == "pulumi-stack-operator"}
    run, reconcile = by_name["run"], by_name["reconcile"]
    assert run.parent_span_id == reconcile.span_id
    assert reconcile.attributes["k8s.namespace.name"] == stacks.namespace
    for leg in ("checkout", "operate", "conclude"):
        assert by_name[leg].parent_span_id == run.span_id, leg
    assert run.attributes["pulumi_stack_operator.generation"] == ready["metadata"]["generation"]
    assert run.attributes["pulumi_stack_operator.commit"] == program.first
    assert run.attributes["pulumi_stack_operator.operation"] == "up"
    assert by_name["conclude"].attributes["pulumi_stack_operator.error"] == "None"
    if bed.on_node:  # the run pod's legs, from its own timestamps, under operate
        pod_legs = {s.name: s for s in trace if s.name.startswith("pod.")}
        assert {"pod.scheduling", "pod.agent"} <= set(pod_legs), sorted(pod_legs)
        for span in pod_legs.values():
            assert span.parent_span_id == by_name["operate"].span_id, span.name
            assert span.attributes["k8s.pod.name"] == "traced-pulumi"
    exemplar = f'# {{trace_id="{run.trace_id}"}}'
    assert exemplar in openmetrics(operator), "the update's duration has no exemplar of its trace"
    root = cli_root(trace)
    assert root is not None
    assert root.parent_span_id == by_name["operate"].span_id
    engine = [s for s in trace if s.service == "pulumi-cli"]
    assert len(engine) > 5, [s.name for s in engine]  # the engine's steps, plugins, RPCs
    print(tree(trace))  # noqa: T201 - the trace, for a failure's report and the docs
    # From the Stack to its trace: lastUpdate and the run's Events name it.
    assert ready["status"]["lastUpdate"]["traceId"] == run.trace_id
    for event in stacks.wait_events("traced", "UpdateStarted", "Succeeded"):
        if event.reason in ("UpdateStarted", "Succeeded"):
            assert event.message.endswith(f"(trace {run.trace_id})"), event.message
    runs = [s for s in otel_collector.spans() if s.name == "run"]
    assert [s.attributes[STACK] for s in runs] == ["traced"], "one run span per run"
    exported = json.dumps([span_text(s) for s in otel_collector.spans()])
    for value in sentinels.values():
        assert value not in exported, "a secret value is in a span"


def tree(trace: list[Span]) -> str:
    """``trace`` as an indented tree: each span's service, name and milliseconds."""
    children: dict[str, list[Span]] = {}
    for span in sorted(trace, key=lambda s: s.start_ns):
        children.setdefault(span.parent_span_id, []).append(span)
    ids = {s.span_id for s in trace}
    lines: list[str] = []

    def walk(span: Span, depth: int) -> None:
        took = (span.end_ns - span.start_ns) / 1e6
        lines.append(f"{'  ' * depth}{span.name} [{span.service}] {took:.0f} ms")
        for child in children.get(span.span_id, []):
            walk(child, depth + 1)

    for root in [s for s in trace if s.parent_span_id not in ids]:
        walk(root, 0)
    return "\n".join(lines)


def openmetrics(operator: Operator) -> str:
    """The operator's /metrics in the OpenMetrics format (the one with exemplars)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{operator.metrics_port}/metrics",
        headers={"Accept": "application/openmetrics-text; version=1.0.0"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
        return str(response.read().decode())


def span_text(span: Span) -> dict[str, Any]:
    """Everything a span carries that could hold a value."""
    return {"name": span.name, "attributes": span.attributes, "events": span.events}


@pytest.mark.parametrize("operator_env", [{}], ids=["no-otel-variables"])
def test_without_the_variables_nothing_is_exported(
    otel_collector: OtelCollector, stacks: Stacks, program: Program, operator: Operator
) -> None:
    """Tracing is off by default: after a run, a stopped operator and Collector, no span."""
    stacks.create(stacks.manifest("untraced", program))
    ready = stacks.wait_ready("untraced", timeout=120)
    assert "traceId" not in ready["status"]["lastUpdate"]
    assert operator.stop() == 0
    otel_collector.stop()
    assert otel_collector.spans() == []
