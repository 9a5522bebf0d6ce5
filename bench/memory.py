"""Memory: the operator's resident set with 0, 1,000, 5,000 and 10,000 Stacks cached.

For each size the operator is started on the fleet, left to evaluate every Stack (so the
cache, the per-Stack metric series and the work queue's bookkeeping all exist), given
``SETTLE`` seconds, and its ``VmRSS`` and peak ``VmHWM`` are read from
``/proc/<pid>/status``. Size 0 is an empty namespace: the fixed cost of the interpreter,
the kubernetes client and the metrics. ``per_stack_kib`` is the slope between the
smallest and the largest fleet; ``obj_kib`` the JSON size of one seeded Stack as the API
returns it, for comparison. All of that with tracing off (the default: no OpenTelemetry
code loaded); then once more at the first fleet size with tracing on (``--otel-endpoint``,
the test bed's Collector receiving), ``n<size>_traced_rss_mib``: what turning it on costs.
"""

from __future__ import annotations

import time

from bench.context import Context
from bench.operator import Operator
from bench.stats import Summary
from testbed.assets import find_built
from testbed.otel_collector import OtelCollector

START_TIMEOUT = 900.0
SETTLE = 2.0


def run(ctx: Context) -> Summary:
    """Measure RSS at each size; one summary line (RSS in MiB)."""
    fleets = [ctx.scale.stacks * factor for factor in (1, *ctx.scale.memory_factors)]
    fields: dict[str, float | str] = {}
    sizes: list[tuple[int, float]] = []
    for wanted in (0, *fleets):
        namespace = ctx.bed.namespace("empty") if wanted == 0 else ctx.fleet.namespace
        if wanted:
            ctx.fleet.ensure(wanted)
        count = len(ctx.fleet.names) if wanted else 0
        ctx.progress(f"memory: operator with {count} Stacks cached")
        with Operator(ctx.bed, namespace) as operator:
            operator.wait_until("/readyz", START_TIMEOUT)
            operator.wait_reconciled(count, START_TIMEOUT)
            time.sleep(SETTLE)
            rss, peak = operator.memory_mib()
        fields[f"n{count}_rss_mib"] = rss
        fields[f"n{count}_peak_mib"] = peak
        sizes.append((count, rss))
        if wanted == fleets[0]:  # before the fleet grows past it
            fields.update(_traced(ctx, count))
    (n1, rss1), (n2, rss2) = sizes[1], sizes[-1]
    fields["per_stack_kib"] = (rss2 - rss1) * 1024 / (n2 - n1) if n2 > n1 else float("nan")
    fields["obj_kib"] = ctx.fleet.object_bytes / 1024
    return Summary.of("memory", **fields)


def _traced(ctx: Context, count: int) -> dict[str, float]:
    """RSS with the fleet's ``count`` Stacks cached and tracing on (module docstring)."""
    ctx.progress(f"memory: operator with {count} Stacks cached, tracing on")
    with OtelCollector(find_built("otel"), ctx.bed.root / "otelcol-memory") as collector:
        flag = f"--otel-endpoint={collector.grpc_endpoint}"
        with Operator(ctx.bed, ctx.fleet.namespace, flag) as operator:
            operator.wait_until("/readyz", START_TIMEOUT)
            operator.wait_reconciled(count, START_TIMEOUT)
            time.sleep(SETTLE)
            rss, _ = operator.memory_mib()
    return {f"n{count}_traced_rss_mib": rss}
