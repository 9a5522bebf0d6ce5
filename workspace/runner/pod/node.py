"""Pure readers of a run pod's node and of the errors of the path to it.

Used by ``pod.run`` to tell a run pod whose node went away (kubelet stopped, the node
powered off or cut off) from one that merely runs, and an API call that failed for a
while (the API server restarting, the kubelet it proxies a log from restarting) from one
refused for good. No API call, no clock, no side effect.

The node controller (kube-controller-manager) marks every pod of a node it has not heard
from for ``--node-monitor-grace-period`` (50 s by default) not Ready: the pod's ``Ready``
condition turns False while ``ContainersReady`` stays True, which the kubelet itself
never reports for a container that runs. That is the only sign the pod's own status
gives, and the operator needs no permission on Nodes to read it.
"""

from __future__ import annotations

from datetime import datetime

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from controller.clock import parse_time
from controller.retry import TRANSIENT_STATUSES
from workspace.runner.pod import spec as podspec
from workspace.runner.pod import state as podstate
from workspace.runner.pod.state import Pod
from workspace.runner.types import DEFAULT_INTERRUPT_GRACE

NODE_NOT_READY = "NodeNotReady"  # the reason a run fails with once its node is lost
# A pod's terminationGracePeriodSeconds when it says none: what ``pod.spec`` gives by default.
DEFAULT_GRACE = int(DEFAULT_INTERRUPT_GRACE) + podspec.GRACE_MARGIN


def node_name(pod: Pod) -> str:
    """The node the pod was scheduled to ("" when not scheduled)."""
    return str((pod.get("spec") or {}).get("nodeName") or "")


def grace(pod: Pod) -> float:
    """The pod's termination grace period in seconds."""
    found = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return float(found) if isinstance(found, int | float) else float(DEFAULT_GRACE)


def node_not_ready_since(pod: Pod) -> datetime | None:
    """When the node controller marked the pod not Ready for its node; None if it has not.

    That is: ``Ready`` False while ``ContainersReady`` is True and the run container runs
    (module docstring); the time is the ``Ready`` condition's last transition.
    """
    ready = podstate.condition(pod, "Ready") or {}
    containers = podstate.condition(pod, "ContainersReady") or {}
    if ready.get("status") != "False" or containers.get("status") != "True":
        return None
    if not podstate.container_state(pod).get("running"):
        return None
    return parse_time(ready.get("lastTransitionTime"))


def node_lost(pod: Pod, now: datetime) -> tuple[str, str] | None:
    """(reason, message) once the pod's node has been not ready longer than its grace.

    None while the node is ready, or has been not ready for no longer than the pod's
    termination grace period (``grace``): the time a deleted pod would have had to end.
    """
    since = node_not_ready_since(pod)
    if since is None:
        return None
    seconds = (now - since).total_seconds()
    limit = grace(pod)
    if seconds <= limit:
        return None
    message = (
        f"its node {node_name(pod) or '(unknown)'} has not been ready since "
        f"{since.isoformat()} ({seconds:.0f} s, more than the pod's {limit:.0f} s grace): "
        "the run's outcome is unknown (the update may go on there); the pod is deleted, and "
        "the next run starts once it is gone and runs its program only once the lost run "
        "is over (it stops itself once it learns its pod is gone). Check the node "
        "(kubectl describe node) if this repeats"
    )
    return NODE_NOT_READY, message


def unreachable(err: BaseException) -> bool:
    """Whether an API call failed for a while, not for good: try it again later.

    A connection to the API server that failed (``urllib3``/``OSError``: it restarts or is
    away), an answer of 429 or 5xx (overloaded, or the kubelet it proxies a log from is
    away: 500 "connection refused", 502, 503).
    """
    if isinstance(err, ApiException):
        status = err.status or 0
        return status == 0 or status in TRANSIENT_STATUSES or status >= 500
    return isinstance(err, HTTPError | OSError)
