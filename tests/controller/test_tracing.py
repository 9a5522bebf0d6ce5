"""Tracing: off by default without the SDK loaded; on, nested spans and the CLI's context."""

from __future__ import annotations

import datetime
import subprocess
import sys

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from controller import tracing
from controller.tracing import OFF, TraceContext, cli_endpoint
from pulumi_stack_operator.telemetry import TracingConfigError, configure, endpoint, with_endpoint

COLLECTOR = "http://collector.observability:4317"


def test_off_by_default_and_the_sdk_is_never_loaded() -> None:
    """No variables: OFF; the whole operator's import graph and a reconcile load no SDK."""
    code = (
        "import sys\n"
        "from pulumi_stack_operator import telemetry\n"
        "import reconcile.stack, workspace.runner.local.runner, pulumi_stack_operator.wiring\n"
        "chosen = telemetry.configure({})\n"
        "with chosen.span('reconcile', {'k8s.namespace.name': 'a'}) as span:\n"
        "    span.set_attribute('x', 1)\n"
        "    assert chosen.trace_context() is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
    assert configure({}) is OFF
    assert tracing.tracing() is OFF


@pytest.mark.parametrize(
    "environ",
    [
        {"OTEL_EXPORTER_OTLP_ENDPOINT": COLLECTOR, "OTEL_SDK_DISABLED": "true"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": COLLECTOR, "OTEL_TRACES_EXPORTER": "none"},
        {"OTEL_SERVICE_NAME": "x"},
    ],
    ids=["sdk-disabled", "exporter-none", "no-endpoint"],
)
def test_what_turns_it_off(environ: dict[str, str]) -> None:
    """Disabled, exporter none, or no endpoint: off."""
    assert endpoint(environ) is None


def test_the_traces_endpoint_wins_over_the_general_one() -> None:
    """``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` first, as the SDK reads them."""
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4317"}
    assert endpoint(environ) == "http://a:4317"
    environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = "http://b:4317"
    assert endpoint(environ) == "http://b:4317"


def test_the_flag_wins_over_both_variables_and_off_still_wins_over_it() -> None:
    """``--otel-endpoint`` names the collector; ``OTEL_SDK_DISABLED`` still turns it off."""
    given = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://a:4317"}
    assert endpoint(with_endpoint(given, "http://flag:4317")) == "http://flag:4317"
    assert endpoint(with_endpoint(given, None)) == "http://a:4317"
    assert endpoint(with_endpoint({}, "http://flag:4317")) == "http://flag:4317"
    off = {"OTEL_SDK_DISABLED": "true"}
    assert endpoint(with_endpoint(off, "http://flag:4317")) is None


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://u:p@c:4317"}, "must not hold credentials"),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": COLLECTOR, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": COLLECTOR, "OTEL_TRACES_EXPORTER": "console"},
            "OTEL_TRACES_EXPORTER",
        ),
    ],
    ids=["no-scheme", "credentials", "protocol", "exporter"],
)
def test_a_setting_it_cannot_honour_is_refused_by_name(environ: dict[str, str], named: str) -> None:
    """A configuration error names the variable (and never echoes a password)."""
    with pytest.raises(TracingConfigError, match=named) as raised:
        endpoint(environ)
    assert ":p@" not in str(raised.value)


def test_the_cli_gets_a_plain_text_collector_only() -> None:
    """``http://`` becomes the CLI's ``grpc://``; over TLS the CLI is not given one."""
    assert cli_endpoint("http://collector:4317") == "grpc://collector:4317"
    assert cli_endpoint("https://collector:4317") is None


def finished(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    """The exported spans by name."""
    return {span.name: span for span in exporter.get_finished_spans()}


def test_spans_nest_and_the_cli_gets_the_current_one() -> None:
    """A span opened in another is its child; the CLI's traceparent names the inner one."""
    exporter = InMemorySpanExporter()
    on = configure({"OTEL_EXPORTER_OTLP_ENDPOINT": COLLECTOR}, exporter)
    assert on.trace_context() is None, "no span is current"
    with on.span("reconcile", {"k8s.namespace.name": "team"}), on.span("run") as run:
        run.set_attribute("pulumi_stack_operator.generation", 3)
        context = on.trace_context()
    on.shutdown()
    spans = finished(exporter)
    outer, inner = spans["reconcile"], spans["run"]
    assert inner.parent is not None
    assert inner.parent.span_id == outer.context.span_id
    assert outer.resource.attributes["service.name"] == "pulumi-stack-operator"
    assert inner.attributes == {"pulumi_stack_operator.generation": 3}
    assert isinstance(context, TraceContext)
    version, trace_id, span_id, _ = context.traceparent.split("-")
    assert (version, trace_id, span_id) == (
        "00",
        f"{inner.context.trace_id:032x}",
        f"{inner.context.span_id:016x}",
    )
    assert context.endpoint == "grpc://collector.observability:4317"


def test_a_run_not_sampled_gives_the_cli_no_context_and_writes_no_trace_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sampled out: no ``traceparent`` for the CLI (it would export for nothing), no id."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")  # the SDK reads its own
    exporter = InMemorySpanExporter()
    off = configure({"OTEL_EXPORTER_OTLP_ENDPOINT": COLLECTOR}, exporter)
    with off.span("reconcile"), off.span("run"):
        assert off.trace_context() is None
        assert off.trace_id() is None
    off.shutdown()
    assert exporter.get_finished_spans() == ()


def test_an_exception_fails_the_span_by_its_type_only() -> None:
    """The status names the exception's type; its message (maybe a secret) is nowhere."""
    exporter = InMemorySpanExporter()
    on = configure({"OTEL_EXPORTER_OTLP_ENDPOINT": COLLECTOR}, exporter)
    with pytest.raises(RuntimeError), on.span("run"):
        raise RuntimeError("sentinel-secret")
    on.shutdown()
    span = finished(exporter)["run"]
    assert span.status.description == "RuntimeError"
    assert "sentinel-secret" not in repr(span.to_json())


def test_the_service_name_and_resource_come_from_the_sdks_variables() -> None:
    """``OTEL_SERVICE_NAME`` names it; ``OTEL_RESOURCE_ATTRIBUTES`` adds to it."""
    exporter = InMemorySpanExporter()
    environ = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": COLLECTOR,
        "OTEL_SERVICE_NAME": "stacks-eu",
    }
    on = configure(environ, exporter)
    with on.span("reconcile"):
        pass
    on.shutdown()
    assert finished(exporter)["reconcile"].resource.attributes["service.name"] == "stacks-eu"


def test_a_recorded_span_has_the_times_given_under_the_current_span() -> None:
    """``record``: a finished child of the current span, from ``start`` to ``end``."""
    exporter = InMemorySpanExporter()
    on = configure({"OTEL_EXPORTER_OTLP_ENDPOINT": COLLECTOR}, exporter)
    start = datetime.datetime(2026, 12, 6, 12, 0, tzinfo=datetime.UTC)
    with on.span("operate"):
        on.record("pod.agent", start, start + datetime.timedelta(seconds=4), {"k8s.pod.name": "p"})
    OFF.record("ignored", start, start)  # off: nothing, and no error
    on.shutdown()
    spans = finished(exporter)
    leg, parent = spans["pod.agent"], spans["operate"]
    assert leg.parent is not None
    assert leg.parent.span_id == parent.context.span_id
    assert (leg.start_time, leg.end_time) == (
        int(start.timestamp() * 1e9),
        int(start.timestamp() * 1e9) + 4_000_000_000,
    )
    assert leg.attributes == {"k8s.pod.name": "p"}
