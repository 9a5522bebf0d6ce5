"""One operator through the side-by-side scenario; its figures, keyed for the summary line.

On a control plane of its own, with the bench's watch on its namespace:

1. *Start-up.* ``small`` Stacks exist before the operator starts. ``startup_s`` runs from
   the spawn to the first status write on any of them; ``ready_s`` until every one shows
   ``Ready=True`` for generation 1 (each has run its first ``up``). Then ``rss_small_mib``.
2. *Spec changes.* ``samples`` times, one Stack's ``message`` config is changed. ``ack_ms``
   runs from just before the PATCH to the first version of the new generation showing
   ``Reconciling=True``; ``ack_observes`` is the share of those that already carried the
   new ``observedGeneration`` (kstatus reads a status without it as not yet looked at).
   ``applied_s`` runs to ``Ready=True`` with the new ``observedGeneration``. Medians.
   ``run_verdicts`` is what kstatus concluded from each version in between, in order,
   repeats collapsed (``InProgress>Current``).
3. *A failure.* The Stack's ``payload`` is made invalid base64, so its ``up`` fails. The
   first version that says ``lastUpdate.state: failed`` gives ``fail_ready``,
   ``fail_reconciling`` and ``fail_stalled`` (each condition's status and reason) and
   whether its ``observedGeneration`` names the failed generation (``fail_observes``).
   The versions of a further ``fail_window`` s are read too: ``fail_verdicts`` (as above,
   from the PATCH on) and ``fail_runs``, the ``pulumi up`` runs since the PATCH (the
   first and its retries). Then the payload is put back and the Stack is Ready again.
4. *Scale and idle.* The fleet grows to ``large``; once every Stack is Ready,
   ``rss_large_mib``; then ``idle_window`` s in which nothing changes, counting Stack
   versions (``idle_writes``), Events, ``pulumi`` runs, git requests and operator CPU s.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from kubernetes import client

from bench.fleet import GROUP, PLURAL, VERSION, manifest
from bench.peer.bed import PeerBed
from bench.peer.operators import PeerOperator
from bench.stats import median
from bench.testbed import admin_client, passphrase_namespace
from bench.watch import Seen, StackWatch, condition, is_true, observed, ready
from testbed import kstatus
from testbed.control_plane import ControlPlane

START_TIMEOUT = 300.0
STEP_TIMEOUT = 120.0
FLEET_TIMEOUT = 1200.0
INVALID_PAYLOAD = "not base64!"
VALID_PAYLOAD = "aGVsbG8="

Fields = dict[str, float | str]
MakeOperator = Callable[[ControlPlane, str], PeerOperator]


@dataclasses.dataclass(frozen=True)
class PeerScale:
    """How big the side-by-side runs."""

    small: int = 20
    large: int = 100
    samples: int = 5
    fail_window: float = 30.0
    idle_window: float = 60.0


def measure(bed: PeerBed, label: str, crd: Path, make: MakeOperator, scale: PeerScale) -> Fields:
    """Run the scenario for one operator; its fields (unprefixed)."""
    with bed.cluster(label, crd) as plane:
        api = admin_client(plane.kubeconfig)
        try:
            namespace = passphrase_namespace(api, f"peer-{label}")
            stacks = _Stacks(bed, api, namespace, bed.backend(label))
            stacks.create(range(scale.small))
            with StackWatch(api, namespace) as watch, make(plane, namespace) as operator:
                run = _Run(bed, stacks, watch, operator, scale)
                return {**run.start_up(), **run.changes(), **run.failure(), **run.idle()}
        finally:
            api.close()


class _Stacks:
    """The namespace's Stacks: create and patch them."""

    def __init__(self, bed: PeerBed, api: client.ApiClient, namespace: str, backend: Path) -> None:
        self.bed, self.namespace, self.backend = bed, namespace, backend
        self._api = client.CustomObjectsApi(api)
        self._core = client.CoreV1Api(api)
        self.names: list[str] = []

    def create(self, indexes: Iterable[int]) -> None:
        for index in indexes:
            name = f"peer-{index:03d}"
            spec = self.bed.stack_spec(name, self.backend)
            self._api.create_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, manifest(name, spec)
            )
            self.names.append(name)

    def patch_config(self, name: str, **config: str) -> tuple[int, float]:
        """Merge ``config`` into a Stack's; its new generation and when the PATCH was sent."""
        sent = time.monotonic()
        obj = cast(
            "dict[str, Any]",
            self._api.patch_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, name, {"spec": {"config": config}}
            ),
        )
        return int(obj["metadata"]["generation"]), sent

    def events(self) -> int:
        """Events in the namespace, each counted ``count`` times."""
        items = self._core.list_namespaced_event(self.namespace).items
        return sum(event.count or 1 for event in items)


class _Run:
    """The scenario's steps for one operator; each returns its fields."""

    def __init__(
        self,
        bed: PeerBed,
        stacks: _Stacks,
        watch: StackWatch,
        operator: PeerOperator,
        scale: PeerScale,
    ) -> None:
        self.bed, self.stacks, self.watch, self.operator = bed, stacks, watch, operator
        self.scale = scale

    def start_up(self) -> Fields:
        started = self.operator.started_at
        first = self.watch.wait_for(lambda s: bool(s.obj.get("status")), START_TIMEOUT)
        done = self._all_ready(self.stacks.names)
        return {
            "startup_s": first.arrived - started,
            "ready_s": done - started,
            "rss_small_mib": self.operator.rss_mib(),
        }

    def changes(self) -> Fields:
        name = self.stacks.names[0]
        acks, applied, observes, verdicts = [], [], [], []
        for index in range(self.scale.samples):
            generation, sent = self.stacks.patch_config(name, message=f"change-{index}")
            ack = self.watch.wait_for(_acknowledges(name, generation), STEP_TIMEOUT, after=sent)
            done = self.watch.wait_for(ready(name, generation), STEP_TIMEOUT, after=sent)
            acks.append(ack.arrived - sent)
            applied.append(done.arrived - sent)
            observes.append(1.0 if observed(ack.obj) == generation else 0.0)
            verdicts.append(_verdicts(self.watch.versions(name, sent, done.arrived + 1e-6)))
        return {
            "ack_ms": median(acks) * 1000,
            "ack_observes": sum(observes) / len(observes),
            "applied_s": median(applied),
            "run_verdicts": max(set(verdicts), key=verdicts.count),
        }

    def failure(self) -> Fields:
        name = self.stacks.names[0]
        calls = len(self.bed.pulumi_calls())
        generation, sent = self.stacks.patch_config(name, payload=INVALID_PAYLOAD)
        failed = self.watch.wait_for(_failed(name, generation), STEP_TIMEOUT, after=sent).obj
        time.sleep(self.scale.fail_window)  # a measuring window: what happens next
        versions = self.watch.versions(name, sent, time.monotonic())
        runs = self.bed.pulumi_calls()[calls:].count("up")
        restored, back = self.stacks.patch_config(name, payload=VALID_PAYLOAD)
        self.watch.wait_for(ready(name, restored), STEP_TIMEOUT, after=back)
        return {
            "fail_verdicts": _verdicts(versions),
            "fail_ready": _reason(failed, "Ready"),
            "fail_reconciling": _reason(failed, "Reconciling"),
            "fail_stalled": _reason(failed, "Stalled"),
            "fail_observes": 1.0 if observed(failed) == generation else 0.0,
            "fail_runs": runs,
        }

    def idle(self) -> Fields:
        self.stacks.create(range(self.scale.small, self.scale.large))
        self._all_ready(self.stacks.names[self.scale.small :])
        rss = self.operator.rss_mib()
        calls, git = len(self.bed.pulumi_calls()), self.bed.git.requests()
        events, cpu = self.stacks.events(), self.operator.cpu_seconds()
        start = time.monotonic()
        time.sleep(self.scale.idle_window)  # a measuring window: nothing should happen
        end = time.monotonic()
        return {
            "rss_large_mib": rss,
            "idle_writes": self.watch.modified(start, end),
            "idle_events": self.stacks.events() - events,
            "idle_pulumi": len(self.bed.pulumi_calls()) - calls,
            "idle_git": self.bed.git.requests() - git,
            "idle_cpu_s": self.operator.cpu_seconds() - cpu,
        }

    def _all_ready(self, names: Sequence[str]) -> float:
        """Wait until each of ``names`` is Ready for generation 1; when the last one was."""
        deadline = time.monotonic() + FLEET_TIMEOUT
        seen = [
            self.watch.wait_for(ready(name, 1), max(1.0, deadline - time.monotonic()))
            for name in names
        ]
        return max(s.arrived for s in seen)


def _acknowledges(name: str, generation: int) -> Callable[[Seen], bool]:
    """A version of the new generation that says a reconcile is under way."""

    def check(seen: Seen) -> bool:
        return (
            seen.name == name
            and int(seen.obj["metadata"]["generation"]) == generation
            and is_true(seen.obj, "Reconciling")
        )

    return check


def _failed(name: str, generation: int) -> Callable[[Seen], bool]:
    """A version of ``generation`` whose ``lastUpdate`` records a failed run."""

    def check(seen: Seen) -> bool:
        last = (seen.obj.get("status") or {}).get("lastUpdate") or {}
        return (
            seen.name == name
            and int(seen.obj["metadata"]["generation"]) == generation
            and last.get("state") == "failed"
        )

    return check


def _reason(obj: Mapping[str, Any], type_: str) -> str:
    """``<status>_<reason>`` of a condition (``False_UpdateFailed``), ``-`` when absent."""
    found = condition(obj, type_)
    return f"{found.get('status')}_{found.get('reason')}" if found else "-"


def _verdicts(versions: Iterable[Seen]) -> str:
    """What kstatus concludes from each version, in order, repeats collapsed: ``A>B>C``."""
    found: list[str] = []
    for seen in versions:
        verdict = str(kstatus.read_status(seen.obj).status)
        if not found or found[-1] != verdict:
            found.append(verdict)
    return ">".join(found) or "-"
