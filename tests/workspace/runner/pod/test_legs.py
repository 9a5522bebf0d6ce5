"""A run pod's legs from its timestamps: each only when both of its ends are known."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from workspace.runner.pod.legs import Leg, legs

T0 = datetime(2026, 12, 6, 12, 0, 0, tzinfo=UTC)


def at(seconds: int) -> str:
    """``T0`` plus ``seconds``, as the API server writes times."""
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(**status: Any) -> dict[str, Any]:
    """A run pod created at ``T0`` with ``status``."""
    return {"metadata": {"name": "web-pulumi", "creationTimestamp": at(0)}, "status": status}


def test_a_pod_that_ran_has_every_leg_in_order() -> None:
    """Scheduled at 1 s, checkout 2-3 s, the run container from 5 s, its outcome at 9 s."""
    ran = pod(
        conditions=[{"type": "PodScheduled", "status": "True", "lastTransitionTime": at(1)}],
        initContainerStatuses=[
            {
                "name": "checkout",
                "state": {"terminated": {"startedAt": at(2), "finishedAt": at(3)}},
            }
        ],
        containerStatuses=[{"name": "pulumi", "state": {"running": {"startedAt": at(5)}}}],
    )
    assert legs(ran, T0 + timedelta(seconds=9)) == [
        Leg("pod.scheduling", T0, T0 + timedelta(seconds=1)),
        Leg("pod.checkout", T0 + timedelta(seconds=2), T0 + timedelta(seconds=3)),
        Leg("pod.start", T0 + timedelta(seconds=3), T0 + timedelta(seconds=5)),
        Leg("pod.agent", T0 + timedelta(seconds=5), T0 + timedelta(seconds=9)),
    ]


def test_a_pod_that_never_ran_has_only_what_its_timestamps_bound() -> None:
    """Scheduled, its checkout still running: only the scheduling leg."""
    waiting = pod(
        conditions=[{"type": "PodScheduled", "status": "True", "lastTransitionTime": at(1)}],
        initContainerStatuses=[
            {"name": "checkout", "state": {"running": {"startedAt": at(2)}}},
        ],
    )
    assert [leg.name for leg in legs(waiting, T0 + timedelta(seconds=9))] == ["pod.scheduling"]
    assert legs(pod(), T0) == []
