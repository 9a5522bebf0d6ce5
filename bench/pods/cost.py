"""What one run costs under each runner, and where a pod run spends its time.

The cost: the cached TypeScript program (``node-outputs``) as a Stack under the pod runner,
as a Stack under the local runner (each with an operator of its own, default flags, on the
node cluster's control plane), as a Stack under the pod runner whose run pods are kept
warm (an operator of its own with ``--run-pod-keep-warm``: after its first run each run is
handed to the same pod; ``cost_warm_reused`` counts them, ``cost_warm_idle_pods`` is the
idle gauge after the rounds) and as a bare ``pulumi up`` (``bench.programs``'
``TypeScriptCli``), interleaved as in ``bench.overhead`` (each round's order rotated).
The two Stacks' first runs (cold caches: ``npm ci``, the plugin step) and the CLI's
``npm ci`` and first ``up`` are not timed. A round changes the ``value`` config on each
side: a Stack's time runs from just before its PATCH until the Stack watch sees Ready for
the new generation; the CLI's is ``pulumi up`` alone. Before the next round, the pod run's
pod is seen deleted (untimed), so no run waits for an earlier one's pod.

The split: the same pod Stack's runs again, under an operator at ``--log-level=debug``
(the headline rounds stay at the default level), the Stack now keeping its last run pod
(``workspaceReclaimPolicy: Retain``, set by a run of its own before). After each run the
bench reads the kept pod (its own times) and its run container's log with the kubelet's
timestamps, then deletes it and waits until it is gone; with the run's debug ``Run
timed`` line they make its legs (``bench.pods.timeline``: ``split`` and ``around``). The
figures are means over those runs (``timeline.means`` says why), as are the operator's
own legs of them (``op_<leg>_s``: announce, checkout, runner, conclude).

The warm split: the warm Stack's runs again, under a warm operator at
``--log-level=debug``; its first run starts a pod (the cost rounds' operator deleted its
idle one as it stopped; untimed), each later one is handed to that pod and split from its
``Run timed`` line (``timeline.warm_split``): ``warm_split_<leg>_s``, means, with
``warm_split_fit_s`` and ``warm_split_take_s`` (the handover's parts, from its own log
line), ``warm_split_e2e_s`` and ``warm_split_reused`` (handovers counted by that
operator).
"""

from __future__ import annotations

import dataclasses
import datetime
import secrets
from collections.abc import Mapping
from statistics import fmean
from typing import Any

from bench.context import Context
from bench.overhead import alternate
from bench.pods.bed import PodBed, Tenant
from bench.pods.podwatch import RunPods
from bench.pods.stacks import Change, Stacks, delete_retained, pod_gone, retained
from bench.pods.timeline import (
    HANDED,
    agent_span,
    around,
    means,
    pod_times,
    run_timed,
    split,
    warm_split,
)
from bench.programs import TypeScriptCli
from bench.stats import median
from bench.watch import Seen, StackWatch

FIRST_RUN_TIMEOUT = 900.0  # seconds: npm ci through the mirror, the plugin step, up
UPDATE_TIMEOUT = 300.0
START_TIMEOUT = 120.0  # seconds until a fresh operator's cache has synced
OPERATOR_LEGS = ("announce", "checkout", "runner", "conclude")  # the Run timed line's own
WARM_WINDOW = "300s"  # the warm Stack's window: longer than the rounds between two of its runs


def measure(ctx: Context, bed: PodBed, pods: RunPods) -> dict[str, float]:
    """The cost rounds, then the split rounds; their summary fields."""
    runs = ctx.scale.overhead_runs
    pod, local = bed.tenant("pods-cost"), bed.tenant("pods-local", pod=False)
    kept = bed.tenant("pods-warm")
    cli = TypeScriptCli(ctx.bed, f"cli-{secrets.token_hex(3)}")
    with StackWatch(bed.api, None) as watch:
        sides = _Sides(bed, Stacks(bed.api, watch), pods, cli, (pod, local, kept))
        with (
            bed.operator([pod]),
            bed.operator([local], pod=False),
            bed.operator([kept], f"--run-pod-keep-warm={WARM_WINDOW}") as warm,
        ):
            ctx.progress("pods: first runs of the three Stacks (cold caches), the CLI's npm ci")
            sides.warm_up()
            rounds = (sides.pod, sides.local, sides.warm, sides.cli)
            alternate(ctx.progress, "pods: cost", runs, rounds, "w")
            sides.retain()
            warm_fields = {
                "cost_warm_reused": warm.counter("pulumi_stack_run_pods_reused_total"),
                "cost_warm_created": warm.counter("pulumi_stack_run_pods_created_total"),
                "cost_warm_idle_pods": warm.counter("pulumi_stack_run_pods_idle"),
            }
        fields = sides.fields() | warm_fields
        with bed.operator([pod], "--log-level=debug") as debug:
            debug.wait_until("/readyz", START_TIMEOUT)
            ctx.progress(f"pods: {runs} pod runs at debug level, each pod kept, for the split")
            traced = [sides.traced(f"d{index}") for index in range(1, runs + 1)]
        fields |= _split(traced, run_timed(debug.log.read_text(errors="replace"), sides.pod_name))
        fields |= _warm_rounds(ctx, bed, sides, kept)
    return fields


def _warm_rounds(ctx: Context, bed: PodBed, sides: _Sides, kept: Tenant) -> dict[str, float]:
    """The warm split (module docstring): a first run, then runs handed over, each split."""
    runs = ctx.scale.overhead_runs
    flags = ("--log-level=debug", f"--run-pod-keep-warm={WARM_WINDOW}")
    with bed.operator([kept], *flags) as debug:
        debug.wait_until("/readyz", START_TIMEOUT)
        ctx.progress(f"pods: a warm pod's first run, then {runs} handed over at debug level")
        sides.warm_timed("dw0")
        e2e = [sides.warm_timed(f"dw{index}") for index in range(1, runs + 1)]
        reused = debug.counter("pulumi_stack_run_pods_reused_total")
    log = debug.log.read_text(errors="replace")
    timed, handed = run_timed(log, sides.warm_name)[1:], run_timed(log, sides.warm_name, HANDED)
    if not len(timed) == len(handed) == len(e2e):
        msg = (
            f"{len(e2e)} warm debug runs but {len(timed)} 'Run timed' lines after the first "
            f"and {len(handed)} handovers"
        )
        raise RuntimeError(msg)
    legs = means([warm_split(t, run) for t, run in zip(timed, e2e, strict=True)])
    parts = means([{k: h.get(f"{k}_s", 0.0) for k in ("fit", "take")} for h in handed])
    return {f"warm_split_{leg}_s": v for leg, v in (legs | parts).items()} | {
        "warm_split_e2e_s": fmean(e2e),
        "warm_split_reused": reused,
    }


@dataclasses.dataclass(frozen=True)
class Traced:
    """A debug run: PATCH → Ready (s), the PATCH's wall time, the kept pod and its log."""

    e2e: float
    sent_wall: float
    pod: Mapping[str, Any]
    log: str


class _Sides:
    """The pod Stack, the local Stack and the bare CLI, and the times they took."""

    def __init__(
        self,
        bed: PodBed,
        stacks: Stacks,
        pods: RunPods,
        cli: TypeScriptCli,
        tenants: tuple[Tenant, Tenant, Tenant],
    ) -> None:
        """Stacks of the program in the pod, local and warm ``tenants``, and ``cli``."""
        self._bed, self._stacks, self._pods, self._cli = bed, stacks, pods, cli
        self._pod, self._local, self._warm = tenants
        tag = secrets.token_hex(3)
        self.pod_name, self.local_name = f"ts-pod-{tag}", f"ts-local-{tag}"
        self.warm_name = f"ts-warm-{tag}"
        self.samples: dict[str, list[float]] = {
            k: [] for k in ("pod", "local", "warm", "cli", "pod_run", "local_run", "config")
        }

    def warm_up(self) -> None:
        """Create the Stacks and prepare the CLI meanwhile; wait for their first runs."""
        spec = self._bed.spec
        created = [
            self._stacks.create(tenant.namespace, name, spec(tenant, name, "w0"))
            for tenant, name in (
                (self._pod, self.pod_name),
                (self._local, self.local_name),
                (self._warm, self.warm_name),
            )
        ]
        self._cli.prepare("w0")
        for change in created:
            self._stacks.applied(change, FIRST_RUN_TIMEOUT)
        pod_gone(self._pods, created[0])

    def pod(self, value: str) -> None:
        """One timed pod run; then its pod is seen gone (untimed)."""
        change = self._stacks.set_value(self._pod.namespace, self.pod_name, value)
        self._record("pod", *self._applied(change))
        pod_gone(self._pods, change)

    def retain(self) -> None:
        """Make the pod Stack keep its run pods (a run, untimed), and delete the one kept."""
        change = self._stacks.patch(
            self._pod.namespace, self.pod_name, {"workspaceReclaimPolicy": "Retain"}
        )
        self._applied(change)
        delete_retained(self._bed.api, self._pods, change)

    def traced(self, value: str) -> Traced:
        """One pod run whose pod is kept: read it and its log, then delete it (untimed)."""
        change = self._stacks.set_value(self._pod.namespace, self.pod_name, value)
        e2e, _ = self._applied(change)
        pod, log = retained(self._bed.api, change)
        delete_retained(self._bed.api, self._pods, change)
        return Traced(e2e, change.sent_wall, pod, log)

    def warm(self, value: str) -> None:
        """One timed run of the Stack whose run pod is kept warm (its pod stays)."""
        self.samples["warm"].append(self.warm_timed(value))

    def warm_timed(self, value: str) -> float:
        """A run of the warm Stack: its PATCH → Ready, not recorded."""
        change = self._stacks.set_value(self._warm.namespace, self.warm_name, value)
        return self._applied(change)[0]

    def local(self, value: str) -> None:
        """One timed local run."""
        change = self._stacks.set_value(self._local.namespace, self.local_name, value)
        self._record("local", *self._applied(change))

    def cli(self, value: str) -> None:
        """Set the config with the CLI (timed apart), then time ``pulumi up``."""
        self.samples["config"].append(self._cli("config", "set", "value", value))
        self.samples["cli"].append(self._cli("up", "--yes", "--skip-preview"))

    def _applied(self, change: Change) -> tuple[float, Seen]:
        seen = self._stacks.applied(change, UPDATE_TIMEOUT)
        return seen.arrived - change.sent, seen

    def _record(self, side: str, e2e: float, seen: Seen) -> None:
        self.samples[side].append(e2e)
        run = float(seen.obj["status"]["history"][0]["durationSeconds"])
        self.samples[f"{side}_run"].append(run)

    def fields(self) -> dict[str, float]:
        """Medians and ratios."""
        pod, local, up = (median(self.samples[k]) for k in ("pod", "local", "cli"))
        warm = median(self.samples["warm"])
        return {
            "cost_warm_e2e_s": warm,
            "cost_warm_ratio": warm / up,
            "runs": len(self.samples["cli"]),
            "cost_pod_e2e_s": pod,
            "cost_local_e2e_s": local,
            "cost_cli_up_s": up,
            "cost_pod_run_s": median(self.samples["pod_run"]),
            "cost_local_run_s": median(self.samples["local_run"]),
            "cost_cli_config_s": median(self.samples["config"]),
            "cost_pod_ratio": pod / up,
            "cost_local_ratio": local / up,
            "cost_pod_vs_local": pod / local,
        }


def _split(runs: list[Traced], timed: list[dict[str, float]]) -> dict[str, float]:
    """Means of each leg of the debug runs (``split``, ``around``) and the operator's own."""
    if len(timed) != len(runs):
        msg = f"{len(runs)} debug runs but {len(timed)} 'Run timed' lines in the operator's log"
        raise RuntimeError(msg)
    legs = [
        split(pod_times(run.pod), inside, run.e2e)
        | around(_wall(run.sent_wall), agent_span(run.log), run.e2e)
        for run, inside in zip(runs, timed, strict=True)
    ]
    ours = means([{leg: t.get(f"{leg}_s", 0.0) for leg in OPERATOR_LEGS} for t in timed])
    return {f"split_{leg}_s": v for leg, v in means(legs).items()} | {
        f"op_{leg}_s": v for leg, v in ours.items()
    }


def _wall(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC)
