"""Command-line entry point (``pulumi-stack-operator``, ``python -m pulumi_stack_operator``).

Two programs share it: the operator, and a run pod's agent (``agent`` first; ``agent
take`` hands a warm run pod its next job, ``pulumi_stack_operator.warm``). Each
imports only its own modules, inside its branch: the agent starts twice per pod run (the
checkout, then the run), so the operator's modules (the Kubernetes client, its config
loaders and models: about 0.3 s and 20 MiB) must not be imported on its way.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run the agent (``agent`` first, no other arguments) or the operator.

    The operator's flags are parsed first (exit 2 on bad input).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["agent", "take"]:  # a warm run pod's next job, handed over: nothing else
        from pulumi_stack_operator import warm  # noqa: PLC0415

        return warm.take_main(sys.stdin, sys.stdout, os.environ)
    if args[:1] == ["agent"]:
        # Not the take's either: structlog (asyncio with it) is about 70 ms of imports.
        from controller.logs import configure_logging  # noqa: PLC0415

        configure_logging("json", "info")
        from pulumi_stack_operator import agent  # noqa: PLC0415

        return agent.main(args[1:])
    return operator(args)


def operator(args: list[str]) -> int:
    """Parse flags (exit 2 on bad input), configure logging, run the operator.

    The operator reads time on one clock: logs, the manager and (through its context)
    every part the wiring makes.
    """
    # The operator's modules: imported here so that the agent never loads them. The
    # Kubernetes client's packages first, without their eager __init__ (controller.kubeimports).
    from controller import kubeimports  # noqa: PLC0415

    kubeimports.lean()
    kubeimports.preload()
    import prometheus_client  # noqa: PLC0415

    from controller import heap, tracing  # noqa: PLC0415
    from controller.clock import RealClock  # noqa: PLC0415
    from controller.logs import configure_logging  # noqa: PLC0415
    from controller.manager import Manager, run  # noqa: PLC0415
    from pulumi_stack_operator import telemetry  # noqa: PLC0415
    from pulumi_stack_operator.config import parse_config  # noqa: PLC0415

    heap.limit_arenas()  # before any thread starts
    cfg = parse_config(args)
    try:
        chosen = telemetry.configure(telemetry.with_endpoint(os.environ, cfg.otel_endpoint))
    except telemetry.TracingConfigError as err:
        print(f"pulumi-stack-operator: error: {err}", file=sys.stderr)  # noqa: T201
        return 2
    tracing.install(chosen)
    clock = RealClock()
    configure_logging(cfg.manager.log_format, cfg.manager.log_level, clock=clock)
    # No *_created series: they double the exposition, client-go's metrics have none, and
    # dashboards built for controller-runtime do not expect them.
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
    # Imported after logging is configured, so that what the imports log is formatted.
    from pulumi_stack_operator.wiring import STACKS, stack_reconciler_factory  # noqa: PLC0415

    try:
        return run(
            Manager(cfg.manager, "stacks", STACKS, stack_reconciler_factory(cfg), clock=clock)
        )
    finally:
        chosen.shutdown()  # what is batched goes out before the process does


if __name__ == "__main__":
    sys.exit(main())
