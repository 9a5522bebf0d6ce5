"""Pure readers for the pods benchmark: a run pod's timeline, its legs, how many pods at once.

A run pod's own object says when it was created (``metadata.creationTimestamp``),
scheduled (the ``PodScheduled`` condition's ``lastTransitionTime``), and when its checkout
init container and its run container started and finished (``state.running.startedAt``,
``state.terminated.startedAt`` / ``finishedAt``). The API gives all of them to the second
(RFC 3339 without a fraction), so a leg between two of them is off by up to a second
either way. ``pod_times`` reads them; ``split`` makes the legs of one run from them, the
agent's own measurements (``in_runner_<phase>_s`` of the operator's debug ``Run timed``
line, sub-second) and the run's end-to-end time, the rest being ``other``. ``means``
averages legs over runs: a leg between two whole-second times is too short or too long
by the runs' sub-second phases, which the mean evens out (a median of whole seconds does
not), and the mean legs add up to the mean end-to-end time as each run's do.

A kept run pod's log, read with the kubelet's timestamps (sub-second), pins the agent:
``agent_span`` is when its first line and its outcome line were written, and ``around``
splits the run's PATCH → Ready into ``before_agent`` (the operator, scheduling, the
sandbox, the checkout container, the run container's start and the agent's own start-up),
``agent`` (its operation: install, CLI and its own work) and ``after_agent`` (its outcome
reported → Ready seen: the operator reading the line, releasing the pod, concluding the
run and writing the status; the container's own end is no longer waited for).

``occupancy`` replays a pod watch's versions (ADDED, MODIFIED, DELETED) and tells how
many run pods existed at once in a window: ``live`` ones (not being deleted: runs in
flight) and all, those being deleted too; ``placement`` how many run pods each node was
given in a window (``spec.nodeName``, a pod counted once). ``run_timed`` reads a Stack's
``Run timed`` lines from the debug log; ``container_running`` matches the pod version
that first shows a run's container running.

A run handed to a warm pod has no pod of its own to read: ``warm_split`` makes its legs
from its ``Run timed`` line alone. ``handover``: the operator's runner leg less what the
agent measured (the exec that hands the job over, the agent's wait for it, the reports
read back); ``checkout``, ``install``, ``cli``: the agent's own; ``operator``: the
operator's announce, checkout and conclude legs; ``other``: the rest of PATCH → Ready
(the change reaching the operator through its watch, the queue, the status write seen).
The handover's own line (``HANDED``, at info level) has two parts of it: ``fit_s`` (the
pod read, the Secrets' versions for its fit) and ``take_s`` (the exec and the annotation).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Mapping, Sequence
from statistics import fmean
from typing import Any

from bench.watch import Predicate, Seen
from controller.clock import parse_time
from workspace.runner import Outcome, parse_line
from workspace.runner.pod import spec as podspec
from workspace.runner.pod import state as podstate

Stamp = datetime.datetime | None
SPLIT = ("schedule", "start", "checkout", "install", "cli", "other")
"""The legs of a run that add up to its end-to-end time, in order."""
TIMED = "Run timed"  # the operator's debug line with a run's legs
AGENT = ("checkout", "install", "cli")
"""The legs the agent measures itself (``Outcome.seconds``)."""


@dataclasses.dataclass(frozen=True)
class PodTimes:
    """When a run pod got where (seconds precision; None: the object did not say)."""

    created: Stamp
    scheduled: Stamp
    init_started: Stamp
    init_finished: Stamp
    main_started: Stamp
    main_finished: Stamp


def pod_times(pod: Mapping[str, Any]) -> PodTimes:
    """The timeline a run pod's object tells (its newest version tells the most)."""
    scheduled: Mapping[str, Any] = next(
        (
            c
            for c in (pod.get("status") or {}).get("conditions") or ()
            if c.get("type") == "PodScheduled" and c.get("status") == "True"
        ),
        {},
    )
    init = _started_finished(podstate.container_state(pod, init=True))
    main = _started_finished(podstate.container_state(pod))
    return PodTimes(
        parse_time(pod["metadata"].get("creationTimestamp")),
        parse_time(scheduled.get("lastTransitionTime")),
        *init,
        *main,
    )


def _started_finished(state: Mapping[str, Any]) -> tuple[Stamp, Stamp]:
    running, ended = state.get("running") or {}, state.get("terminated") or {}
    started = parse_time(running.get("startedAt") or ended.get("startedAt"))
    return started, parse_time(ended.get("finishedAt"))


def split(times: PodTimes, inside: Mapping[str, float], e2e: float) -> dict[str, float]:
    """One run's legs: ``SPLIT`` (summing to ``e2e``, also given), ``init`` and ``handoff``.

    ``schedule``: created → scheduled; ``start``: scheduled → the checkout container
    running (sandbox, image, volumes); ``checkout``, ``install``, ``cli``: the agent's
    ``inside`` seconds (0 for a phase it did not report); ``other``: the rest of ``e2e``.
    ``init`` is the checkout container's life, ``handoff`` its end → the run container
    running. A pod without the checkout container (its run container checks out) starts
    when the run container runs, with no ``init`` or ``handoff`` (0). Raises
    ``ValueError`` naming a timestamp the pod did not give.
    """
    created, scheduled = _need(times, "created"), _need(times, "scheduled")
    main_started = _need(times, "main_started")
    init_started = times.init_started
    legs = {
        "schedule": _seconds(created, scheduled),
        "start": _seconds(scheduled, init_started or main_started),
        **{leg: float(inside.get(f"in_runner_{leg}_s", 0.0)) for leg in AGENT},
    }
    legs["other"] = e2e - sum(legs.values())
    if init_started is None:
        return legs | {"init": 0.0, "handoff": 0.0, "e2e": e2e}
    init_finished = _need(times, "init_finished")
    legs["init"] = _seconds(init_started, init_finished)
    legs["handoff"] = _seconds(init_finished, main_started)
    return legs | {"e2e": e2e}


def means(runs: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The mean of each of the first run's keys over ``runs`` (a key a run lacks counts 0)."""
    if not runs:
        return {}
    return {key: fmean([run.get(key, 0.0) for run in runs]) for key in runs[0]}


def agent_span(log: str) -> tuple[datetime.datetime, datetime.datetime]:
    """When the agent wrote its first line and its outcome line, from a timestamped log.

    Raises ``ValueError`` when the log has no timestamped line or no outcome.
    """
    stamped = [line.split(" ", 1) for line in log.splitlines() if " " in line]
    times = [(parse_time(stamp), text) for stamp, text in stamped]
    found = [(at, text) for at, text in times if at is not None]
    outcome = [at for at, text in found if isinstance(parse_line(text), Outcome)]
    if not found or not outcome:
        raise ValueError("the run pod's log has no timestamped outcome line")
    return found[0][0], outcome[-1]


def around(
    sent: datetime.datetime, span: tuple[datetime.datetime, datetime.datetime], ready: float
) -> dict[str, float]:
    """``before_agent``, ``agent`` and ``after_agent`` of a run (see the module docstring).

    ``sent`` is the PATCH's wall time, ``span`` the agent's (``agent_span``), ``ready`` the
    seconds from the PATCH until Ready was seen; the three add up to ``ready``.
    """
    first, reported = span
    before = _seconds(sent, first)
    agent = _seconds(first, reported)
    return {"before_agent": before, "agent": agent, "after_agent": ready - before - agent}


def _need(times: PodTimes, field: str) -> datetime.datetime:
    found: Stamp = getattr(times, field)
    if found is None:
        msg = f"the run pod's object has no {field} time"
        raise ValueError(msg)
    return found


def _seconds(start: datetime.datetime, end: datetime.datetime) -> float:
    return (end - start).total_seconds()


@dataclasses.dataclass(frozen=True)
class Occupancy:
    """The most run pods at once: ``live`` (not being deleted) and ``existing`` (all)."""

    live: int
    existing: int


def occupancy(versions: Sequence[Seen], start: float, end: float) -> Occupancy:
    """The most run pods at once between ``start`` and ``end`` (watch arrival times)."""
    pods: dict[str, bool] = {}  # uid → being deleted
    live = existing = 0
    for seen in _until(versions, end):
        _apply(pods, seen)
        if seen.arrived >= start:
            live = max(live, sum(1 for deleting in pods.values() if not deleting))
            existing = max(existing, len(pods))
    before = pods_at(versions, start)
    return Occupancy(max(live, len(before["live"])), max(existing, len(before["all"])))


def placement(
    versions: Sequence[Seen], start: float, end: float, nodes: Sequence[str]
) -> dict[str, int]:
    """Per node of ``nodes``: the run pods bound to it seen between ``start`` and ``end``.

    A pod counts once, on the node its versions name (``spec.nodeName``); one never bound
    in the window counts nowhere.
    """
    bound: dict[str, str] = {}
    for seen in versions:
        node = (seen.obj.get("spec") or {}).get("nodeName")
        if start <= seen.arrived <= end and node:
            bound[_uid(seen)] = str(node)
    return {node: sum(1 for on in bound.values() if on == node) for node in nodes}


def pods_at(versions: Sequence[Seen], when: float) -> dict[str, list[str]]:
    """The run pods that existed at ``when``: ``all`` and the ``live`` ones, by name."""
    pods: dict[str, bool] = {}
    names: dict[str, str] = {}
    for seen in _until(versions, when):
        _apply(pods, seen)
        names[_uid(seen)] = f"{seen.obj['metadata'].get('namespace')}/{seen.name}"
    return {
        "all": sorted(names[uid] for uid in pods),
        "live": sorted(names[uid] for uid, deleting in pods.items() if not deleting),
    }


def _until(versions: Sequence[Seen], end: float) -> list[Seen]:
    return sorted((s for s in versions if s.arrived <= end), key=lambda s: s.arrived)


def _apply(pods: dict[str, bool], seen: Seen) -> None:
    if seen.type == "DELETED":
        pods.pop(_uid(seen), None)
    else:
        pods[_uid(seen)] = bool(seen.obj["metadata"].get("deletionTimestamp"))


def _uid(seen: Seen) -> str:
    return str(seen.obj["metadata"]["uid"])


def of_run(seen: Seen, namespace: str, stack: str, generation: int) -> bool:
    """Whether ``seen`` is a version of the run pod of ``stack``'s ``generation``."""
    return (
        seen.obj["metadata"].get("namespace") == namespace
        and seen.name == podspec.pod_name(stack)
        and podstate.annotation(seen.obj, podspec.ANNOTATION_GENERATION) == str(generation)
    )


def container_running(namespace: str, stack: str, generation: int) -> Predicate:
    """Matches the run pod of ``stack``'s ``generation`` showing its run container started."""

    def check(seen: Seen) -> bool:
        return (
            of_run(seen, namespace, stack, generation)
            and podstate.container_started_at(seen.obj) is not None
        )

    return check


WARM_SPLIT = ("handover", "checkout", "install", "cli", "operator", "other")
"""The legs of a run handed to a warm pod, adding up to its PATCH → Ready, in order."""


def warm_split(timed: Mapping[str, float], e2e: float) -> dict[str, float]:
    """One handed-over run's ``WARM_SPLIT`` legs from its ``Run timed`` seconds (docstring)."""
    agent = {leg: timed.get(f"in_runner_{leg}_s", 0.0) for leg in AGENT}
    operator = sum(timed.get(f"{leg}_s", 0.0) for leg in ("announce", "checkout", "conclude"))
    runner = timed.get("runner_s", 0.0)
    handover = runner - sum(agent.values())
    return {"handover": handover, **agent, "operator": operator, "other": e2e - runner - operator}


HANDED = "Handed the run to the warm run pod"  # with the handover's fit_s and take_s


def run_timed(log: str, name: str, event: str = TIMED) -> list[dict[str, float]]:
    """The ``event`` lines (``Run timed``) of Stack ``name`` in the log, in order: their seconds."""
    found = []
    for line in log.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and (entry.get("event"), entry.get("name")) == (event, name):
            found.append({k: float(v) for k, v in entry.items() if k.endswith("_s")})
    return found
