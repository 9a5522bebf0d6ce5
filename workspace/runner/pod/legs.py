"""A run pod's legs, from the pod's own timestamps: what a trace shows of the pod's time.

``legs(pod, ended)`` reads the last state seen of a run pod and returns, in order, the
spans of time its timestamps bound (each only when both its ends are known):

- ``pod.scheduling``: created (``metadata.creationTimestamp``) to scheduled (the
  ``PodScheduled`` condition's transition);
- ``pod.checkout``: the ``checkout`` init container's start to its end;
- ``pod.start``: the checkout's end (else scheduled) to the run container's start (the
  image, the container's creation);
- ``pod.agent``: the run container's start to ``ended`` (its outcome read).

The API server and the kubelet write these to the second: a leg is as exact as that.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from controller.clock import parse_time
from workspace.runner.pod import state as podstate
from workspace.runner.pod.state import Pod


@dataclasses.dataclass(frozen=True)
class Leg:
    """One span of a run pod's time."""

    name: str
    start: datetime
    end: datetime


def legs(pod: Pod, ended: datetime) -> list[Leg]:
    """The legs ``pod``'s timestamps bound (see the module docstring), in order."""
    created = podstate.created_at(pod)
    scheduled_condition = podstate.condition(pod, "PodScheduled") or {}
    scheduled = parse_time(scheduled_condition.get("lastTransitionTime"))
    checkout = podstate.container_state(pod, init=True).get("terminated") or {}
    checkout_start = parse_time(checkout.get("startedAt"))
    checkout_end = parse_time(checkout.get("finishedAt"))
    running = podstate.container_started_at(pod)
    marks = [
        ("pod.scheduling", created, scheduled),
        ("pod.checkout", checkout_start, checkout_end),
        ("pod.start", checkout_end or scheduled, running),
        ("pod.agent", running, ended),
    ]
    return [
        Leg(name, start, end)
        for name, start, end in marks
        if start is not None and end is not None and end >= start
    ]
