"""Command-line entry point (``pulumi-stack-operator``, ``python -m controller``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import prometheus_client

from controller.config import parse_config
from controller.logs import configure_logging
from controller.manager import Manager, run


def main(argv: Sequence[str] | None = None) -> int:
    """Parse flags (exit 2 on bad input), configure logging, run the operator."""
    cfg = parse_config(sys.argv[1:] if argv is None else argv)
    configure_logging(cfg.log_format, cfg.log_level)
    # No *_created series: they double the exposition, client-go's metrics have none, and
    # dashboards built for controller-runtime do not expect them.
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
    from reconcile.setup import STACKS, new_stack_reconciler  # noqa: PLC0415 - after logging

    return run(Manager(cfg, "stacks", STACKS, new_stack_reconciler))


if __name__ == "__main__":
    sys.exit(main())
