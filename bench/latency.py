"""Status latency: a spec change until a watch sees ``Reconciling=True`` for it.

For each fleet size (1, 100 and 1,000 Stacks, all idle and Ready), the operator (default
flags: 2 workers, resync 600 s) is started and left to evaluate every Stack. Then, one at a
time, a Stack's spec is merge-patched and the time from just before the PATCH is sent until
the bench's own watch delivers a version of that Stack with ``Reconciling=True`` and
``status.observedGeneration`` equal to the new generation. The figure includes the PATCH's
round trip, the operator's watch delivery, its queue, the reconcile up to its first status
write, and our watch delivery.

The change sets ``spec.repoDir`` to a directory the program's commit does not have, so the
run that follows fails fast (``ProgramInvalid`` right after the checkout, no Pulumi CLI):
the next sample waits until that run has concluded, so both workers are free again, as
they are for a mostly idle fleet. Samples rotate over at most 10 Stacks; afterwards they
are put back to their seeded spec and Ready status.
"""

from __future__ import annotations

import time
from typing import Any, cast

from kubernetes import client

from bench.context import Context
from bench.fleet import GROUP, PLURAL, VERSION
from bench.operator import Operator
from bench.stats import Summary, percentile
from bench.watch import Seen, StackWatch, concluded, reconciling

SAMPLED_STACKS = 10
SAMPLE_TIMEOUT = 60.0
START_TIMEOUT = 300.0


def run(ctx: Context) -> Summary:
    """Measure every fleet size; one summary line with p50/p99 (ms) per size."""
    fields: dict[str, float | str] = {"samples": ctx.scale.latency_samples}
    for wanted in ctx.scale.latency_sizes():
        size, latencies = _measure(ctx, wanted)
        fields[f"n{size}_p50_ms"] = percentile(latencies, 50) * 1000
        fields[f"n{size}_p99_ms"] = percentile(latencies, 99) * 1000
        fields[f"n{size}_max_ms"] = max(latencies) * 1000
    return Summary.of("latency", **fields)


def _measure(ctx: Context, wanted: int) -> tuple[int, list[float]]:
    """Latencies (s) with a fleet of at least ``wanted``; returns the fleet's real size too."""
    fleet = ctx.fleet
    fleet.ensure(wanted)
    size = len(fleet.names)
    names = fleet.names[:SAMPLED_STACKS]
    ctx.progress(f"latency: {ctx.scale.latency_samples} spec changes among {size} Stacks")
    operator = Operator(ctx.bed, fleet.namespace)
    try:
        with operator, StackWatch(ctx.bed.api, fleet.namespace) as watch:
            operator.wait_until("/readyz", START_TIMEOUT)
            operator.wait_reconciled(size, START_TIMEOUT)
            latencies = [
                _sample(ctx, watch, names[index % len(names)], index)
                for index in range(ctx.scale.latency_samples)
            ]
    finally:
        fleet.restore(names)
    return size, latencies


def _sample(ctx: Context, watch: StackWatch, name: str, index: int) -> float:
    """Change one Stack's spec; seconds until Reconciling=True for it, after the run ends."""
    seen, generation, sent = acknowledged(ctx, watch, name, f"bench-missing-{index}")
    watch.wait_for(concluded(name, generation), SAMPLE_TIMEOUT, after=sent)
    return seen.arrived - sent


def acknowledged(
    ctx: Context, watch: StackWatch, name: str, repo_dir: str
) -> tuple[Seen, int, float]:
    """Point a fleet Stack's ``spec.repoDir`` at ``repo_dir``; wait for its acknowledgment.

    Returns the version that acknowledged it (Reconciling=True for the new generation),
    that generation, and when (``time.monotonic()``) the PATCH was about to be sent.
    """
    api = client.CustomObjectsApi(ctx.bed.api)
    body = {"spec": {"repoDir": repo_dir}}
    sent = time.monotonic()
    obj = cast(
        "dict[str, Any]",
        api.patch_namespaced_custom_object(GROUP, VERSION, ctx.fleet.namespace, PLURAL, name, body),
    )
    generation = int(obj["metadata"]["generation"])
    seen = watch.wait_for(reconciling(name, generation), SAMPLE_TIMEOUT, after=sent)
    return seen, generation, sent
