"""Which tracing the operator runs with, from the OpenTelemetry SDK's ``OTEL_*`` variables.

See ``controller.tracing`` for what tracing does; this module decides whether it is on and
loads the SDK (``controller.otel``) only then.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Final

from controller.tracing import OFF, Tracing

_ENDPOINTS: Final = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_PROTOCOLS: Final = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")


class TracingConfigError(ValueError):
    """An ``OTEL_*`` setting this operator cannot honour; the message names it."""


def endpoint(environ: Mapping[str, str]) -> str | None:
    """The collector ``environ`` names for traces, or None when tracing is off."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    exporter = environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
    if exporter == "none":
        return None
    for name in _ENDPOINTS:
        if value := environ.get(name, "").strip():
            if exporter != "otlp":
                msg = f"OTEL_TRACES_EXPORTER={exporter!r}: only otlp (or none) is supported"
                raise TracingConfigError(msg)
            _check(name, value, environ)
            return value
    return None


def with_endpoint(environ: Mapping[str, str], flag: str | None) -> Mapping[str, str]:
    """``environ`` with the ``--otel-endpoint`` flag's ``flag`` as the traces' endpoint.

    The flag mirrors ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` and wins over both endpoint
    variables; ``OTEL_SDK_DISABLED`` and ``OTEL_TRACES_EXPORTER=none`` still turn tracing
    off. None (no flag) leaves ``environ`` as it is.
    """
    if not flag:
        return environ
    return {**environ, _ENDPOINTS[0]: flag}


def check_url(name: str, value: str) -> None:
    """Raise ``TracingConfigError`` (naming ``name``) unless ``value`` is a collector's URL.

    An ``http://`` or ``https://`` URL with a host and no credentials (a token belongs
    in ``OTEL_EXPORTER_OTLP_HEADERS``, which no process argument carries).
    """
    parsed = urllib.parse.urlsplit(value)
    if parsed.username is not None or parsed.password is not None:  # before echoing it
        msg = f"{name} must not hold credentials (use OTEL_EXPORTER_OTLP_HEADERS)"
        raise TracingConfigError(msg)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        msg = f"{name}={value!r} is not an http:// or https:// URL of an OTLP/gRPC collector"
        raise TracingConfigError(msg)


def _check(name: str, value: str, environ: Mapping[str, str]) -> None:
    check_url(name, value)
    for protocol in _PROTOCOLS:
        given = environ.get(protocol, "").strip()
        if given and given != "grpc":
            msg = f"{protocol}={given!r}: only grpc is supported"
            raise TracingConfigError(msg)


def configure(environ: Mapping[str, str], exporter: object = None) -> Tracing:
    """The tracing ``environ`` asks for (see the module docstring).

    ``exporter`` replaces the OTLP exporter (an SDK ``SpanExporter``, for tests).
    """
    collector = endpoint(environ)
    if collector is None and exporter is None:
        return OFF
    from controller.otel import SdkTracing  # noqa: PLC0415 - the SDK loads only when on

    return SdkTracing(environ, collector or "", exporter)
