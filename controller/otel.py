"""Tracing on: the OpenTelemetry SDK behind ``controller.tracing.Tracing``.

Imported only by ``controller.tracing.configure`` when tracing is on, so that an operator
without a collector never loads the SDK. The provider is this object's own (not the global
one), so a program's or library's use of the global API is not ours to export.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator, Mapping

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.trace.status import Status, StatusCode

from controller.tracing import (
    INSTRUMENTATION,
    SERVICE_NAME,
    Attribute,
    Span,
    TraceContext,
    Tracing,
    cli_endpoint,
)


class SdkTracing(Tracing):
    """Spans through a ``TracerProvider`` of this object's own, batched to ``exporter``."""

    enabled = True

    def __init__(self, environ: Mapping[str, str], collector: str, exporter: object = None) -> None:
        """Export to ``collector`` (OTLP/gRPC, the SDK's ``OTEL_*`` settings), or ``exporter``."""
        service = environ.get("OTEL_SERVICE_NAME", "").strip() or SERVICE_NAME
        resource = Resource.create({"service.name": service}).merge(OTELResourceDetector().detect())
        self._provider = TracerProvider(resource=resource)
        chosen = exporter if isinstance(exporter, SpanExporter) else None
        chosen = chosen or OTLPSpanExporter(endpoint=collector)
        self._provider.add_span_processor(BatchSpanProcessor(chosen))
        self._tracer = self._provider.get_tracer(INSTRUMENTATION)
        self._cli_endpoint = cli_endpoint(collector) if collector else None
        self._propagator = TraceContextTextMapPropagator()

    @contextlib.contextmanager
    def span(self, name: str, attributes: Mapping[str, Attribute] | None = None) -> Iterator[Span]:
        """A child of the current span, current for the block; failed by an exception."""
        with self._tracer.start_as_current_span(
            name,
            attributes=dict(attributes or {}),
            record_exception=False,  # its message may hold a secret
            set_status_on_exception=False,  # would say "Type: message"; ours says the type
        ) as span:
            try:
                yield span
            except BaseException as err:
                span.set_status(Status(StatusCode.ERROR, type(err).__name__))
                raise

    def trace_context(self) -> TraceContext | None:
        """The current span's ``traceparent`` and the CLI's endpoint (see the module doc).

        None for a span not sampled: the CLI would export its spans under a parent that no
        backend receives, at the cost of its run.
        """
        if self._cli_endpoint is None or self.trace_id() is None:
            return None
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier)  # nothing when no valid span is current
        parent = carrier.get("traceparent")
        if parent is None:
            return None
        return TraceContext(traceparent=parent, endpoint=self._cli_endpoint)

    def record(
        self,
        name: str,
        start: datetime.datetime,
        end: datetime.datetime,
        attributes: Mapping[str, Attribute] | None = None,
    ) -> None:
        """A finished child of the current span, from ``start`` to ``end``."""
        span = self._tracer.start_span(
            name, attributes=dict(attributes or {}), start_time=_nanoseconds(start)
        )
        span.end(end_time=_nanoseconds(end))

    def trace_id(self) -> str | None:
        """The current span's trace id, if it is recorded (sampled)."""
        context = trace.get_current_span().get_span_context()
        if not context.is_valid or not context.trace_flags.sampled:
            return None
        return f"{context.trace_id:032x}"

    def shutdown(self) -> None:
        """Flush and stop the exporter."""
        self._provider.shutdown()


def _nanoseconds(at: datetime.datetime) -> int:
    """``at`` (aware) as nanoseconds since the epoch."""
    return int(at.timestamp() * 1_000_000_000)
