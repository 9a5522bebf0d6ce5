"""Logging: structlog and the standard library through one handler on stderr.

Our modules log with ``structlog.get_logger``; libraries (kubernetes, urllib3, pulumi)
log with ``logging``. Both go through one ``ProcessorFormatter`` so every line has the
same shape: JSON by default (for log pipelines), or coloured console output for humans.
Context bound with ``structlog.contextvars`` (the worker binds the object's namespace and
name and a reconcile id) appears on every line logged in that thread, library lines too.

Exceptions are rendered without frame locals, in both formats: locals can hold secrets.
(structlog's console default, with ``rich`` installed, would print every frame's locals.)
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog
from structlog.typing import Processor

LogFormat = Literal["json", "console"]
LEVELS = ("debug", "info", "warning", "error")


def configure_logging(log_format: LogFormat = "json", level: str = "info") -> None:
    """Route structlog and stdlib logging through one stderr handler."""
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
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
