"""A small fleet under the pod runner: start latency, a burst, and what each run costs.

``stacks`` Stacks of the cached TypeScript program, spread over ``namespaces`` namespaces
(each with its own state and cache claims), under one operator with the pod runner and
its shipped defaults (``--workers`` 2, half of them per namespace). Their first runs
(one dependency install per namespace) are not timed. Then:

- one Stack at a time (the previous run over, its pod gone), its ``value`` config is
  changed: a sample is the time from just before the PATCH until the bench's pod watch
  sees that run's pod with its run container started (``spec_to_running_p50_s`` /
  ``_p99_s``);
- every Stack is changed at once (8 threads): the makespan runs from just before the
  first PATCH until the Stack watch has seen every Stack Ready for its new generation;
  ``pods_per_min`` is the run pods the operator created in it
  (``pulumi_stack_run_pods_created``) per minute of it; ``max_concurrent_pods`` is the
  most run pods not being deleted at once on the pod watch (the runs in flight: at most
  the worker count), ``max_existing_pods`` the most counting those being deleted too;
  ``idle_pods`` the run pods not being deleted once every Stack is Ready (none should be),
  and ``drain_s`` how long after that the last run pod was gone;
- over the burst, per run: the operator's API requests (``rest_client_requests_total``,
  by method) and its CPU seconds (``/proc/<pid>/stat`` utime + stime: the operator
  process alone, its children not counted).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.context import Context
from bench.operator import Operator
from bench.pods.bed import PodBed, Tenant
from bench.pods.podwatch import RunPods
from bench.pods.stacks import POD_GONE_TIMEOUT, Change, Stacks, pod_gone
from bench.pods.timeline import container_running, occupancy, pods_at
from bench.stats import percentile
from bench.watch import StackWatch
from testbed.waits import wait_for

FIRST_RUN_TIMEOUT = 900.0
UPDATE_TIMEOUT = 300.0
THREADS = 8
REQUESTS = "rest_client_requests_total"
CREATED = "pulumi_stack_run_pods_created_total"
METHODS = ("GET", "POST", "PATCH", "PUT", "DELETE")

Member = tuple[Tenant, str]  # a Stack's namespace and name


def measure(ctx: Context, bed: PodBed, pods: RunPods, workers: int) -> dict[str, float]:
    """The fleet's samples and burst; their summary fields."""
    count, spaces = ctx.scale.pod_stacks, ctx.scale.pod_namespaces
    tenants = [bed.tenant(f"pods-fleet{i}") for i in range(spaces)]
    tag = secrets.token_hex(2)
    members = [(tenants[i % spaces], f"fleet-{tag}-{i:02d}") for i in range(count)]
    with StackWatch(bed.api, None) as watch, bed.operator(tenants) as operator:
        stacks = Stacks(bed.api, watch)
        ctx.progress(f"pods: {count} Stacks in {spaces} namespaces, their first runs")
        changes = _all_at_once(members, lambda m: stacks.create(*_created(bed, m)))
        _settle(stacks, pods, changes, FIRST_RUN_TIMEOUT + count * 60 / workers)
        ctx.progress(f"pods: {count} spec changes, one at a time, until the pod runs")
        samples = [_to_running(stacks, pods, member) for member in members]
        ctx.progress(f"pods: all {count} Stacks changed at once")
        fields = _burst(stacks, pods, operator, members, UPDATE_TIMEOUT + count * 60 / workers)
    return {
        "stacks": count,
        "namespaces": spaces,
        "spec_to_running_p50_s": percentile(samples, 50),
        "spec_to_running_p99_s": percentile(samples, 99),
        **fields,
    }


def _created(bed: PodBed, member: Member) -> tuple[str, str, dict[str, Any]]:
    tenant, name = member
    return tenant.namespace, name, bed.spec(tenant, name, "f0")


def _all_at_once(members: list[Member], send: Callable[[Member], Change]) -> list[Change]:
    with ThreadPoolExecutor(THREADS) as pool:
        return list(pool.map(send, members))


def _settle(stacks: Stacks, pods: RunPods, changes: list[Change], timeout: float) -> float:
    """Wait until every change is applied and its pod gone; when the last was seen Ready."""
    deadline = time.monotonic() + timeout
    seen = [stacks.applied(c, max(1.0, deadline - time.monotonic())) for c in changes]
    for change in changes:
        pod_gone(pods, change)
    return max(s.arrived for s in seen)


def _to_running(stacks: Stacks, pods: RunPods, member: Member) -> float:
    """Change one Stack; seconds until its run pod's container is seen started."""
    tenant, name = member
    change = stacks.set_value(tenant.namespace, name, "one")
    predicate = container_running(change.namespace, change.name, change.generation)
    running = pods.wait_for(predicate, UPDATE_TIMEOUT, after=change.sent)
    _settle(stacks, pods, [change], UPDATE_TIMEOUT)
    return running.arrived - change.sent


def _burst(
    stacks: Stacks, pods: RunPods, operator: Operator, members: list[Member], timeout: float
) -> dict[str, float]:
    """Change every Stack at once; the burst's fields (see the module docstring)."""
    runs = len(members)
    cpu, calls = operator.cpu_seconds(children=False), operator.by_label(REQUESTS, "method")
    created = operator.counter(CREATED)
    start = time.monotonic()
    changes = _all_at_once(members, lambda m: stacks.set_value(m[0].namespace, m[1], "burst"))
    deadline = time.monotonic() + timeout
    end = max(stacks.applied(c, max(1.0, deadline - time.monotonic())).arrived for c in changes)
    cpu = operator.cpu_seconds(children=False) - cpu
    after = operator.by_label(REQUESTS, "method")
    created = operator.counter(CREATED) - created
    idle = len(pods_at(pods.seen(), end)["live"])
    wait_for(
        lambda: not pods_at(pods.seen(), time.monotonic())["all"],
        "every run pod deleted after the burst",
        POD_GONE_TIMEOUT,
        0.1,
        detail=lambda: str(pods_at(pods.seen(), time.monotonic())["all"]),
    )
    gone = max(s.arrived for s in pods.seen() if s.type == "DELETED")
    most = occupancy(pods.seen(), start, end)
    per_method = {
        f"api_{m.lower()}_per_run": (after.get(m, 0) - calls.get(m, 0)) / runs for m in METHODS
    }
    return {
        "burst_makespan_s": end - start,
        "pods_created": created,
        "pods_per_min": created * 60 / (end - start),
        "max_concurrent_pods": most.live,
        "max_existing_pods": most.existing,
        "idle_pods": idle,
        "drain_s": max(0.0, gone - end),
        "api_per_run": (sum(after.values()) - sum(calls.values())) / runs,
        **per_method,
        "cpu_per_run_s": cpu / runs,
    }
