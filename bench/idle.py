"""Idle cost: what 1,000 Ready Stacks cost per hour when nothing changes.

The operator runs with a short ``--resync-period`` (10 s: every Stack is re-evaluated from
the cache every 10 s, 60 times more often than the default). Once it has evaluated every
Stack, a fixed window starts; over the window the bench counts:

- status writes: the operator's ``pulumi_stack_status_patches_total`` (all results), and
  Stack versions delivered to the bench's own watch (any write: status, metadata, spec);
- Events: new Event objects in the namespace plus raised ``count`` fields (dedupe PATCHes);
- API requests: the operator's ``rest_client_requests_total``, per Stack per hour;
- reconciles (``controller_runtime_reconcile_total``), proving the resyncs happened, and
  the operator's CPU use (``/proc/<pid>/stat``) as a share of one core.
"""

from __future__ import annotations

import time

from bench.context import Context
from bench.operator import Operator
from bench.stats import Summary
from bench.watch import StackWatch

START_TIMEOUT = 600.0


def run(ctx: Context) -> Summary:
    """Observe an idle fleet for the window; one summary line."""
    fleet, scale = ctx.fleet, ctx.scale
    fleet.ensure(scale.stacks)
    count = len(fleet.names)
    ctx.progress(
        f"idle: {count} Ready Stacks, resync {scale.idle_resync:g}s, {scale.idle_window:g}s window"
    )
    operator = Operator(ctx.bed, fleet.namespace, f"--resync-period={scale.idle_resync}")
    with StackWatch(ctx.bed.api, fleet.namespace) as watch, operator:
        operator.wait_until("/readyz", START_TIMEOUT)
        operator.wait_reconciled(count, START_TIMEOUT)
        before = _counters(ctx, operator)
        start, cpu = time.monotonic(), operator.cpu_seconds()
        time.sleep(scale.idle_window)
        end, cpu = time.monotonic(), operator.cpu_seconds() - cpu
        after = _counters(ctx, operator)
        versions = watch.modified(start, end)
    window = end - start
    delta = {key: after[key] - before[key] for key in before}
    return Summary.of(
        "idle",
        stacks=count,
        window_s=window,
        resync_s=scale.idle_resync,
        reconciles=delta["reconciles"],
        status_writes=delta["writes"],
        stack_writes=versions,
        events=delta["events"],
        api_requests=delta["requests"],
        api_per_stack_hour=delta["requests"] / count * 3600 / window,
        cpu_pct=100 * cpu / window,
    )


def _counters(ctx: Context, operator: Operator) -> dict[str, float]:
    return {
        "reconciles": operator.counter("controller_runtime_reconcile_total"),
        "writes": operator.counter("pulumi_stack_status_patches_total"),
        "requests": operator.counter("rest_client_requests_total"),
        "events": float(ctx.bed.event_count(operator.namespace)[1]),
    }
