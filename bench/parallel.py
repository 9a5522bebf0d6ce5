"""Parallel updates: K new Stacks at once, each program taking a fixed time, per worker count.

For each ``--workers`` value a fresh namespace gets a fresh operator; once it is ready, K
Stacks are created at once (8 threads), each a new stack of the ``files`` program whose one
resource takes ``delay`` seconds to create (a sleep in the dynamic provider: wall time, no
CPU). The makespan runs from just before the first create until the bench's watch has seen
every Stack Ready. Reported per worker count ``w``:

- ``w<w>_per_min``: updates per minute (K / makespan);
- ``w<w>_run_s``: median ``history[0].durationSeconds`` (one update's Pulumi run time);
- ``w<w>_cpu_s``: CPU seconds per update used by the operator and every process it reaped
  (git, the Pulumi CLI, language host, program and provider);
- ``w<w>_busy_pct``: how busy the machine's CPUs were during the makespan (all processes,
  including other users of this shared machine).

With ``c`` CPU seconds per update, ``n`` cores and ``d`` the delay, throughput can grow with
``w`` until ``w · c / (d + c) ≈ n``: past that the CPUs, not the workers, are the limit.
"""

from __future__ import annotations

import secrets
import time
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client

from bench.context import Context
from bench.fleet import GROUP, PLURAL, VERSION, manifest, stack_spec
from bench.machine import CpuTimes
from bench.operator import Operator
from bench.stats import Summary, median
from bench.watch import StackWatch, ready

START_TIMEOUT = 120.0
CREATE_THREADS = 8


def run(ctx: Context) -> Summary:
    """Measure each worker count; one summary line."""
    scale = ctx.scale
    fields: dict[str, float | str] = {
        "updates": scale.parallel_updates,
        "delay_s": scale.parallel_delay,
    }
    for workers in scale.parallel_workers:
        fields.update(_measure(ctx, workers))
    return Summary.of("parallel", **fields)


def _measure(ctx: Context, workers: int) -> dict[str, float]:
    scale, bed = ctx.scale, ctx.bed
    count = scale.parallel_updates
    namespace = bed.namespace(f"parallel-w{workers}")
    tag = secrets.token_hex(2)
    names = [f"par-{tag}-w{workers}-{i:02d}" for i in range(count)]
    api = client.CustomObjectsApi(bed.api)
    timeout = START_TIMEOUT + count * (scale.parallel_delay + 60)
    ctx.progress(f"parallel: {count} updates of {scale.parallel_delay:g}s with {workers} workers")
    # One namespace: the per-namespace cap would leave the extra workers idle.
    operator = Operator(
        bed, namespace, f"--workers={workers}", "--max-concurrent-reconciles-per-namespace=0"
    )
    with StackWatch(bed.api, namespace) as watch, operator:
        operator.wait_until("/readyz", START_TIMEOUT)
        machine, cpu = CpuTimes.now(), operator.cpu_seconds()
        started = time.monotonic()

        def create(name: str) -> None:
            spec = stack_spec(bed, name, delay=str(scale.parallel_delay))
            api.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, manifest(name, spec)
            )

        with ThreadPoolExecutor(CREATE_THREADS) as pool:
            list(pool.map(create, names))
        seen = [watch.wait_for(ready(name, 1), timeout) for name in names]
        makespan = max(s.arrived for s in seen) - started
        cpu = operator.cpu_seconds() - cpu
        busy = CpuTimes.now().busy_fraction_since(machine)
    runs = [float(s.obj["status"]["history"][0]["durationSeconds"]) for s in seen]
    return {
        f"w{workers}_makespan_s": makespan,
        f"w{workers}_per_min": count * 60 / makespan,
        f"w{workers}_run_s": median(runs),
        f"w{workers}_cpu_s": cpu / count,
        f"w{workers}_busy_pct": 100 * busy,
    }
