"""A real OpenTelemetry Collector: OTLP/gRPC in, every span to a JSON-lines file.

``OtelCollector(binary_dir, root, host)`` runs the test bed's Collector
(``testbed.assets.otel``) on ``host`` (loopback unless given: the node's pods reach the host
end of the node's network), with its OTLP/gRPC receiver on a free port and the file
exporter writing what it receives to ``root/traces.jsonl``, flushed every 100 ms.
``spans()`` reads them back as ``Span`` records (trace and span ids in hex, attributes as
plain values, the resource's ``service.name``). Healthy once the receiver accepts
connections.
"""

from __future__ import annotations

import dataclasses
import json
import socket
from pathlib import Path
from typing import Any

from testbed.process import Process, Served, free_port

DIST_NAME = "otelcol-pso"


@dataclasses.dataclass(frozen=True)
class Span:
    """One span as the Collector received it."""

    service: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    status_code: int
    start_ns: int
    end_ns: int
    events: tuple[dict[str, Any], ...] = ()


def _value(value: dict[str, Any]) -> object:
    """An OTLP JSON ``AnyValue`` as a plain value."""
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        return int(value["intValue"])
    if "arrayValue" in value:
        return [_value(v) for v in value["arrayValue"].get("values", [])]
    return None


def _attributes(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {item["key"]: _value(item.get("value", {})) for item in items or []}


class OtelCollector(Served):
    """The Collector process (see the module docstring); a context manager."""

    def __init__(self, binary_dir: Path, root: Path, host: str = "127.0.0.1") -> None:
        """Prepare (not start) a Collector listening on ``host``, its files under ``root``."""
        self.binary = binary_dir / DIST_NAME
        self.root = root
        self.host = host
        self.grpc_port = free_port()
        self.output = root / "traces.jsonl"
        self._process: Process | None = None

    @property
    def grpc_endpoint(self) -> str:
        """The OTLP/gRPC endpoint, as ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes it."""
        return f"http://{self.host}:{self.grpc_port}"

    def start(self) -> None:
        """Write its configuration, start it, and wait until its receiver listens."""
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "config.json"  # YAML is a superset of JSON
        config.write_text(json.dumps(self._config()))
        argv = [str(self.binary), f"--config={config}"]
        self._process = Process("otelcol", argv, self.root / "logs")
        self._process.start(self._listening)

    def stop(self) -> None:
        """Stop it (SIGTERM: it flushes what it holds, then SIGKILL); safe to call twice."""
        if self._process is not None:
            self._process.stop()

    def spans(self) -> list[Span]:
        """Every span written so far, in the order received."""
        if not self.output.exists():
            return []
        found: list[Span] = []
        for line in self.output.read_text().splitlines():
            if line.strip():
                found.extend(_spans_of(json.loads(line)))
        return found

    def _listening(self) -> bool:
        with socket.create_connection((self.host, self.grpc_port), timeout=1):
            return True

    def _config(self) -> dict[str, Any]:
        loopback = self.host
        return {
            "receivers": {
                "otlp": {
                    "protocols": {
                        "grpc": {"endpoint": f"{loopback}:{self.grpc_port}"},
                    }
                }
            },
            "exporters": {
                "file": {"path": str(self.output), "flush_interval": "100ms"},
            },
            "service": {
                "telemetry": {"metrics": {"level": "none"}},
                "pipelines": {"traces": {"receivers": ["otlp"], "exporters": ["file"]}},
            },
        }


def _spans_of(batch: dict[str, Any]) -> list[Span]:
    """The spans of one exported batch (an OTLP JSON ``TracesData``)."""
    spans: list[Span] = []
    for resource_spans in batch.get("resourceSpans", []):
        resource = _attributes(resource_spans.get("resource", {}).get("attributes"))
        service = str(resource.get("service.name", ""))
        for scope_spans in resource_spans.get("scopeSpans", []):
            spans.extend(
                Span(
                    service=service,
                    name=span["name"],
                    trace_id=span["traceId"],
                    span_id=span["spanId"],
                    parent_span_id=span.get("parentSpanId", ""),
                    attributes=_attributes(span.get("attributes")),
                    status_code=int(span.get("status", {}).get("code", 0)),
                    start_ns=int(span.get("startTimeUnixNano", 0)),
                    end_ns=int(span.get("endTimeUnixNano", 0)),
                    events=tuple(span.get("events", [])),
                )
                for span in scope_spans.get("spans", [])
            )
    return spans
