"""OpenTelemetry traces: off unless the standard ``OTEL_*`` variables say where to send them.

Contract:

* ``pulumi_stack_operator.telemetry.configure(environ)`` decides, from the OpenTelemetry
  SDK's own variables, whether tracing is on (this module never imports the SDK;
  ``controller.otel`` holds what does): on when ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
  ``OTEL_EXPORTER_OTLP_ENDPOINT`` names a collector, unless ``OTEL_SDK_DISABLED=true`` or
  ``OTEL_TRACES_EXPORTER=none``. Spans go over OTLP/gRPC, batched (``OTEL_BSP_*``),
  sampled by ``OTEL_TRACES_SAMPLER``, with the resource of ``OTEL_SERVICE_NAME`` (default
  ``pulumi-stack-operator``) and ``OTEL_RESOURCE_ATTRIBUTES``. Off, the SDK is never
  imported: tracing costs no memory and no time.
* ``install`` makes a ``Tracing`` the process's; ``tracing()`` returns it (``OFF`` until
  then). ``span(name, attributes)`` opens a child of the thread's current span (a root
  span when there is none) and makes it current for the block; an exception leaving the
  block marks it failed with the exception's type only (messages may hold secrets).
* ``trace_context()`` is what a Pulumi CLI run needs to hang its own spans (the engine's:
  plugins, steps, resources) under the current span: the W3C ``traceparent`` (the CLI reads
  ``TRACEPARENT``) and the endpoint for ``--otel-traces`` (``grpc://host:port``). None when
  tracing is off, nothing is current, or the collector is reached over TLS (the CLI's own
  exporter is then not given the endpoint: only the operator's spans are sent).
* ``record(name, start, end, attributes)`` adds a finished child span of the current one
  with the times given (what something else timed, such as a pod's own timestamps).
* ``trace_id()`` is the current trace's id (32 hex digits), for a user to find the trace
  from the Stack; None when off or nothing is current (or the trace is not sampled).
* ``shutdown()`` flushes what is batched; call it once, at exit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Final, Protocol

SERVICE_NAME: Final = "pulumi-stack-operator"
INSTRUMENTATION: Final = "pulumi-stack-operator"

Attribute = str | int | float | bool


@dataclasses.dataclass(frozen=True)
class TraceContext:
    """Where a child process's spans belong: ``traceparent`` (W3C) and the CLI's endpoint."""

    traceparent: str
    endpoint: str


class Span(Protocol):
    """What a block may do with its span."""

    def set_attribute(self, key: str, value: Attribute) -> None:
        """Record ``key`` on the span (never a secret value)."""


class _NoSpan:
    def set_attribute(self, key: str, value: Attribute) -> None:
        del key, value


class Tracing:
    """Tracing off: every span is a no-op and there is no context to hand on."""

    enabled = False

    @contextlib.contextmanager
    def span(self, name: str, attributes: Mapping[str, Attribute] | None = None) -> Iterator[Span]:
        """A no-op span."""
        del name, attributes
        yield _NoSpan()

    def trace_context(self) -> TraceContext | None:
        """None: nothing to hand on."""
        return None

    def trace_id(self) -> str | None:
        """None: no trace."""
        return None

    def record(
        self,
        name: str,
        start: datetime.datetime,
        end: datetime.datetime,
        attributes: Mapping[str, Attribute] | None = None,
    ) -> None:
        """Nothing to record."""
        del name, start, end, attributes

    def shutdown(self) -> None:
        """Nothing to flush."""


OFF: Final = Tracing()
_installed: Tracing = OFF


def install(chosen: Tracing) -> None:
    """Make ``chosen`` the process's tracing (``tracing()``)."""
    global _installed  # noqa: PLW0603 - one tracing per process, set once at start-up
    _installed = chosen


def tracing() -> Tracing:
    """The process's tracing (``OFF`` until ``install``)."""
    return _installed


def cli_endpoint(collector: str) -> str | None:
    """``--otel-traces`` for the Pulumi CLI: ``grpc://host:port`` of a plain-text collector."""
    parsed = urllib.parse.urlsplit(collector)
    if parsed.scheme != "http":
        return None
    return f"grpc://{parsed.netloc}"
