"""Latency under saturation: a spec change acknowledged while every worker is in an update.

The fleet (1,000 idle Ready Stacks) plus one slow Stack per worker, in the fleet's
namespace. The operator runs with its default 2 workers and a per-namespace cap equal to
them, so that both workers can be taken by the slow Stacks: each one's first update
sleeps ``SLOW_SECONDS`` in its provider. Once both slow Stacks show ``currentUpdate`` (the
workers are in their runs), fleet Stacks' specs are merge-patched one at a time, and each
sample is the time from just before the PATCH is sent until the bench's watch delivers a
version of that Stack with ``Reconciling=True`` and ``status.observedGeneration`` equal to
the new generation: the acknowledgment, which must not wait for a worker. The changed
Stacks' runs wait in the queue (they are not awaited). The sampling must end while both
slow updates still run; it fails otherwise, since later samples would not be saturated.

The headline runs the operator at its default log level. Then the same is done again with
a fresh operator at ``--log-level=debug`` (``DEBUG_SAMPLES`` changes), so that each
acknowledgment logs its own legs (``Acknowledged``: watch event received → handler →
acknowledger thread → PATCH returned); the summary adds their p99 for the sampled Stacks
(``op_*_p99_ms``). The difference between ``p99_ms`` and ``op_total_p99_ms`` is about
the part the operator does not control: the API server's PATCH handling before it
answers, and the watch carrying the change to the operator and to the bench.

Afterwards the operator is stopped (interrupting the slow updates), the slow Stacks are
deleted (their finalizer removed first) and the sampled Stacks put back to their seeded
spec and Ready status.
"""

from __future__ import annotations

import json
import secrets
from typing import Any, cast

from kubernetes import client

from bench.context import Context
from bench.fleet import GROUP, PLURAL, VERSION, manifest, stack_spec
from bench.latency import acknowledged
from bench.operator import Operator
from bench.stats import Summary, percentile
from bench.watch import Predicate, Seen, StackWatch

WORKERS = 2  # the operator's default --workers
SLOW_SECONDS = 600  # each slow update's provider sleep: longer than any sampling
SAMPLED_STACKS = 10
START_TIMEOUT = 300.0
DEBUG_SAMPLES = 100  # changes sampled again under a debug-level operator, for the legs


def run(ctx: Context) -> Summary:
    """One summary line: p50/p99/max (ms) of the acknowledgments under saturation.

    The headline samples come from an operator at its default log level; then a second
    operator, at debug, is sampled ``DEBUG_SAMPLES`` times for the legs.
    """
    fleet = ctx.fleet
    fleet.ensure(ctx.scale.stacks)
    names = fleet.names[:SAMPLED_STACKS]
    latencies, _ = _round(ctx, names, ctx.scale.latency_samples)
    _, log = _round(ctx, names, min(DEBUG_SAMPLES, ctx.scale.latency_samples), "--log-level=debug")
    legs = acknowledgment_legs(log, set(names))
    return Summary.of(
        "saturation",
        stacks=len(fleet.names),
        busy=WORKERS,
        samples=len(latencies),
        p50_ms=percentile(latencies, 50) * 1000,
        p99_ms=percentile(latencies, 99) * 1000,
        max_ms=max(latencies) * 1000,
        **{f"op_{leg}_p99_ms": percentile(values, 99) for leg, values in legs.items() if values},
    )


def _round(ctx: Context, names: list[str], samples: int, *flags: str) -> tuple[list[float], str]:
    """Saturate a fresh operator (``flags`` added) and sample ``samples`` changes; its log."""
    fleet = ctx.fleet
    size = len(fleet.names)
    slow = [f"slow-{secrets.token_hex(3)}" for _ in range(WORKERS)]
    cap = f"--max-concurrent-reconciles-per-namespace={WORKERS}"
    operator = Operator(ctx.bed, fleet.namespace, f"--workers={WORKERS}", cap, *flags)
    api = client.CustomObjectsApi(ctx.bed.api)
    try:
        with operator, StackWatch(ctx.bed.api, fleet.namespace) as watch:
            operator.wait_until("/readyz", START_TIMEOUT)
            operator.wait_reconciled(size, START_TIMEOUT)
            ctx.progress(f"saturation: {WORKERS} slow updates among {size} Stacks {flags}")
            for name in slow:
                spec = stack_spec(ctx.bed, name, delay=str(SLOW_SECONDS))
                api.create_namespaced_custom_object(
                    GROUP, VERSION, fleet.namespace, PLURAL, manifest(name, spec)
                )
            for name in slow:
                watch.wait_for(_running(name), START_TIMEOUT)
            ctx.progress(f"saturation: {samples} spec changes, workers busy")
            latencies = [
                _sample(ctx, watch, names[index % len(names)], index) for index in range(samples)
            ]
            _assert_still_busy(api, fleet.namespace, slow)
    finally:
        _delete(api, fleet.namespace, slow)
        fleet.restore(names)
    return latencies, operator.log.read_text(errors="replace")


LEGS = ("delivery", "queued", "write", "total")


def acknowledgment_legs(log: str, names: set[str]) -> dict[str, list[float]]:
    """The ``Acknowledged`` debug lines' legs (ms) for Stacks ``names``, by leg.

    The operator's log is JSON lines; other lines (and other Stacks') are skipped.
    """
    legs: dict[str, list[float]] = {leg: [] for leg in LEGS}
    for line in log.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict) or entry.get("event") != "Acknowledged":
            continue
        if str(entry.get("key", "")).partition("/")[2] not in names:
            continue
        for leg in LEGS:
            legs[leg].append(float(entry[f"{leg}_ms"]))
    return legs


def _running(name: str) -> Predicate:
    """A watch predicate: ``name`` shows an update in flight (a worker is in its run)."""

    def check(seen: Seen) -> bool:
        status = seen.obj.get("status") or {}
        return bool(seen.name == name and status.get("currentUpdate"))

    return check


def _sample(ctx: Context, watch: StackWatch, name: str, index: int) -> float:
    """Change one Stack's spec; seconds until its acknowledgment is seen."""
    seen, _, sent = acknowledged(ctx, watch, name, f"bench-saturated-{index}")
    return seen.arrived - sent


def _assert_still_busy(api: client.CustomObjectsApi, namespace: str, slow: list[str]) -> None:
    """Fail unless every slow update still ran when the sampling ended."""
    for name in slow:
        found = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        if not (cast("dict[str, Any]", found).get("status") or {}).get("currentUpdate"):
            msg = f"{name}'s slow update ended before the sampling did: not saturated"
            raise RuntimeError(msg)


def _delete(api: client.CustomObjectsApi, namespace: str, names: list[str]) -> None:
    """Remove the slow Stacks (the operator is stopped: drop its finalizer first)."""
    for name in names:
        try:
            api.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, {"metadata": {"finalizers": None}}
            )
            api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except client.ApiException as err:
            if err.status != 404:
                raise
