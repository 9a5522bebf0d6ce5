"""The pod runner (``bench=pods``): what a run costs in a pod, where it goes, how a fleet fares.

The benchmark starts a node cluster of its own (``bed``: control plane, scheduler,
controller-manager, and ``Scale.pod_nodes`` nodes, each a kubelet and containerd in a
network namespace of its own, the operator's image imported into each, a git server and
the package mirror on the node's host address), runs every
operator as a process on this machine against it, and stops it at the end, leaving
nothing behind (``NodeCluster.leftovers()`` must be empty). One run gives one line:

1. ``cost``: the cached TypeScript program under the pod runner, under the local runner
   and as a bare ``pulumi up``, interleaved (``cost``): ``cost_pod_e2e_s``,
   ``cost_local_e2e_s``, ``cost_cli_up_s``, and ``cost_pod_ratio`` /
   ``cost_local_ratio`` against the bare CLI;
2. ``split``: where a pod run's time goes, from its pod's own object (seconds precision)
   and the agent's own measurements in the operator's debug ``Run timed`` line, on runs
   of their own at debug level (``cost``, ``timeline``): ``split_<leg>_s``, means;
3. the fleet (``fleet``): spec change → run pod running (p50 / p99, on a sample of the
   Stacks), a burst of every Stack at once (pods per minute, the most run pods at once
   against the worker count, run pods left once all are Ready, how the scheduler spread
   them over the nodes), and per run the operator's API requests and CPU and the nodes'
   CPU (the run pods' own cost).

``workers`` is the operator's shipped ``--workers`` default, which every operator here
runs with; ``--quick`` makes the rounds and the fleet smaller (``Scale.quick``).
"""

from __future__ import annotations

from bench.context import Context
from bench.pods import cost, fleet
from bench.pods.bed import PodBed
from bench.pods.podwatch import RunPods
from bench.stats import Summary
from pulumi_stack_operator.config import build_parser


def run(ctx: Context) -> Summary:
    """Cost, split and fleet on a node cluster of the benchmark's own; one summary line."""
    workers = int(build_parser().get_default("workers"))
    fields: dict[str, float | str] = {"workers": workers}
    bed = PodBed(ctx.bed, ctx.progress, ctx.scale.pod_nodes)
    with bed, RunPods(bed.api) as pods:
        fields |= cost.measure(ctx, bed, pods)
        fields |= fleet.measure(ctx, bed, pods, workers)
    return Summary.of("pods", **fields)
