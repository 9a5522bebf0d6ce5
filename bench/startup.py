"""Start-up: process start until every cached Stack has been evaluated, and what it cost.

The fleet (1,000 idle, Ready Stacks) exists before the operator starts. Times are taken
from just before the spawn: ``/healthz`` answering (the interpreter has imported the
operator, built the manager and run ``pulumi version`` once), ``/readyz`` answering (the
informer's first list is in the cache), and ``controller_runtime_reconcile_total`` reaching
the number of Stacks (each has been reconciled once and found nothing due). The probes are
polled every 20 ms (``Operator.start`` first waits, polling every 50 ms, for the probe port
to answer at all, usually with 503 from ``/healthz``) and the restricted ``/metrics`` every
50 ms, so each time is late by at most that much.

At that moment ``rest_client_requests_total`` gives the API calls the start took. Then the
operator gets ``SETTLE`` more seconds, and the bench checks that it really did nothing:
no status PATCH (``pulumi_stack_status_patches_total``), no version of any Stack on the
bench's own watch since the spawn (so no write of any kind), no Event in the namespace.
"""

from __future__ import annotations

import time

from bench.context import Context
from bench.operator import Operator
from bench.stats import Summary
from bench.watch import StackWatch

START_TIMEOUT = 600.0
SETTLE = 3.0


def run(ctx: Context) -> Summary:
    """Start the operator on the fleet and time its start-up; one summary line."""
    fleet = ctx.fleet
    fleet.ensure(ctx.scale.stacks)
    count = len(fleet.names)
    events_before = ctx.bed.event_count(fleet.namespace)[1]
    ctx.progress(f"start-up: operator on {count} Ready Stacks")
    operator = Operator(ctx.bed, fleet.namespace)
    with StackWatch(ctx.bed.api, fleet.namespace) as watch, operator:
        serving = operator.wait_until("/healthz", START_TIMEOUT)
        synced = operator.wait_until("/readyz", START_TIMEOUT)
        evaluated = operator.wait_reconciled(count, START_TIMEOUT)
        calls = operator.by_label("rest_client_requests_total", "method")
        time.sleep(SETTLE)
        writes = operator.counter("pulumi_stack_status_patches_total")
        versions = watch.modified(operator.started_at, time.monotonic())
    events = ctx.bed.event_count(fleet.namespace)[1] - events_before
    return Summary.of(
        "startup",
        stacks=count,
        serving_s=serving - operator.started_at,
        synced_s=synced - operator.started_at,
        evaluated_s=evaluated - operator.started_at,
        api_calls=sum(calls.values()),
        api_get=calls.get("GET", 0),
        api_other=sum(v for k, v in calls.items() if k != "GET"),
        status_writes=writes,
        stack_writes=versions,
        events=events,
    )
