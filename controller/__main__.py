"""Command-line entry point (``pulumi-stack-operator``, ``python -m controller``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import structlog

from controller.config import parse_config
from controller.logs import configure_logging


def main(argv: Sequence[str] | None = None) -> int:
    """Parse flags (exit 2 on bad input), configure logging, run the operator."""
    cfg = parse_config(sys.argv[1:] if argv is None else argv)
    configure_logging(cfg.log_format, cfg.log_level)
    structlog.get_logger(__name__).error(
        "Not yet: the Stack reconciler lands with the Stack API work; the manager is ready"
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
