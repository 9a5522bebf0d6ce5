"""Logging: structlog and the standard library through one handler on stderr.

Our modules log with ``structlog.get_logger``; libraries (kubernetes, urllib3, pulumi)
log with ``logging``. Both go through one ``ProcessorFormatter`` so every line has the
same shape: JSON by default (for log pipelines), or coloured console output for humans.
Context bound with ``structlog.contextvars`` (the worker binds the object's namespace and
name and a reconcile id) appears on every line logged in that thread, library lines too.

Exceptions are rendered without frame locals, in both formats: locals can hold secrets.
(structlog's console default, with ``rich`` installed, would print every frame's locals.)

Each line's ``timestamp`` is the ``Clock``'s wall time in UTC, in ISO 8601 with a ``Z``
(what structlog's ``TimeStamper(fmt="iso", utc=True)`` writes).
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from controller.clock import Clock, RealClock

LogFormat = Literal["json", "console"]
LEVELS = ("debug", "info", "warning", "error")


def timestamper(clock: Clock) -> Processor:
    """A processor stamping each event with ``clock.wall()`` as ISO 8601 UTC ("...Z")."""

    def stamp(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        del logger, method_name
        event_dict["timestamp"] = clock.wall().isoformat().replace("+00:00", "Z")
        return event_dict

    return stamp


def configure_logging(
    log_format: LogFormat = "json", level: str = "info", *, clock: Clock | None = None
) -> None:
    """Route structlog and stdlib logging through one stderr handler; stamp by ``clock``."""
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        timestamper(clock or RealClock()),
        structlog.processors.StackInfoRenderer(),
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    renderer: list[Processor]
    if log_format == "console":
        # plain_traceback: the standard library's format, never locals, whatever is installed.
        renderer = [
            structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback)
        ]
    else:
        transformer = structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
        renderer = [
            structlog.processors.ExceptionRenderer(transformer),
            structlog.processors.JSONRenderer(),
        ]
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *renderer],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # urllib3 logs every retry of a dropped watch at WARNING; ours say it better.
    logging.getLogger("urllib3").setLevel(max(logging.ERROR, root.level))
