"""A small fleet under the pod runner: start latency, a burst, and what each run costs.

``stacks`` Stacks of the cached TypeScript program, spread over ``namespaces`` namespaces
(each with its own state and cache claims), under one operator with the pod runner and
its shipped defaults (``--workers`` 2, half of them per namespace), on the bed's
``nodes`` nodes. Their first runs (one dependency install per namespace) are not timed.
Then:

- one Stack at a time, for the first ``samples`` Stacks (the previous run over, its pod
  gone), its ``value`` config is changed: a sample is the time from just before the PATCH
  until the bench's pod watch sees that run's pod with its run container started
  (``spec_to_running_p50_s`` / ``_p99_s``);
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
  process alone, its children not counted), and the nodes' CPU seconds (every pod's
  cgroup, summed over the nodes: the run pods' own cost, init container and agent);
  ``node_pods`` is how many of the burst's run pods each node was given (``a+b``) and
  ``nodes_used`` on how many nodes any ran.
"""

from __future__ import annotations

import dataclasses
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
from bench.pods.timeline import container_running, occupancy, placement, pods_at
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


@dataclasses.dataclass(frozen=True)
class Meters:
    """What the burst is measured by, read at one moment."""

    cpu: float  # the operator's own CPU seconds
    calls: dict[str, float]  # its API requests so far, by method
    created: float  # the run pods it has created
    node_cpu: float  # every node's pods' CPU seconds

    @classmethod
    def read(cls, operator: Operator, bed: PodBed) -> Meters:
        """The meters now."""
        return cls(
            operator.cpu_seconds(children=False),
            operator.by_label(REQUESTS, "method"),
            operator.counter(CREATED),
            bed.node_cpu(),
        )


def measure(ctx: Context, bed: PodBed, pods: RunPods, workers: int) -> dict[str, float | str]:
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
        sampled = members[: ctx.scale.pod_samples]
        ctx.progress(f"pods: {len(sampled)} spec changes, one at a time, until the pod runs")
        samples = [_to_running(stacks, pods, member) for member in sampled]
        ctx.progress(f"pods: all {count} Stacks changed at once")
        timeout = UPDATE_TIMEOUT + count * 60 / workers
        burst = _burst(stacks, members, timeout, lambda: Meters.read(operator, bed))
    fields = _burst_fields(bed, pods, burst)
    return {
        "stacks": count,
        "namespaces": spaces,
        "nodes": len(bed.node.node_names),
        "samples": len(samples),
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


@dataclasses.dataclass(frozen=True)
class Burst:
    """Every Stack changed at once: when, and the meters before and after."""

    runs: int
    start: float  # just before the first PATCH (time.monotonic())
    end: float  # when the last Stack was seen Ready for its new generation
    before: Meters
    after: Meters

    def per_run(self, value: Callable[[Meters], float]) -> float:
        """How much of ``value`` the burst added, per run."""
        return (value(self.after) - value(self.before)) / self.runs


def _burst(
    stacks: Stacks, members: list[Member], timeout: float, read: Callable[[], Meters]
) -> Burst:
    """Change every Stack at once and wait until each is Ready for its new generation."""
    before = read()
    start = time.monotonic()
    changes = _all_at_once(members, lambda m: stacks.set_value(m[0].namespace, m[1], "burst"))
    deadline = time.monotonic() + timeout
    end = max(stacks.applied(c, max(1.0, deadline - time.monotonic())).arrived for c in changes)
    return Burst(len(members), start, end, before, read())


def _burst_fields(bed: PodBed, pods: RunPods, burst: Burst) -> dict[str, float | str]:
    """The burst's fields (see the module docstring), once its run pods are all gone."""
    start, end = burst.start, burst.end
    created = burst.after.created - burst.before.created
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
    placed = placement(pods.seen(), start, end, bed.node.node_names)
    per_method = {f"api_{m.lower()}_per_run": burst.per_run(_calls(m)) for m in METHODS}
    return {
        "burst_makespan_s": end - start,
        "pods_created": created,
        "pods_per_min": created * 60 / (end - start),
        "max_concurrent_pods": most.live,
        "max_existing_pods": most.existing,
        "idle_pods": idle,
        "drain_s": max(0.0, gone - end),
        "api_per_run": burst.per_run(lambda meters: sum(meters.calls.values())),
        **per_method,
        "cpu_per_run_s": burst.per_run(lambda meters: meters.cpu),
        "node_cpu_per_run_s": burst.per_run(lambda meters: meters.node_cpu),
        "node_pods": "+".join(str(placed[node]) for node in bed.node.node_names),
        "nodes_used": sum(1 for n in placed.values() if n),
    }


def _calls(method: str) -> Callable[[Meters], float]:
    """The API requests of ``method`` a reading counts."""
    return lambda meters: meters.calls.get(method, 0)
