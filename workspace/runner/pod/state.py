"""Pure readers of a run pod as the API serves it: whose it is, how far it got, why it ended.

Every function here reads a ``Pod`` (the API's camelCase JSON) and nothing else: no API
call, no clock, no side effect. A field the API leaves out reads as absent, never raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from controller.clock import parse_time
from workspace.runner.job import RunJob
from workspace.runner.pod import spec as podspec

Pod = Mapping[str, Any]
"""A pod as the API serves it (camelCase JSON)."""

CANNOT_START = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)
"""Waiting reasons of a container the kubelet will not start without a change."""

IMAGE_REASONS = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
)
"""Waiting reasons of an image the kubelet cannot pull: the hint names the image setting."""

IMAGE_HINT = (
    "check spec.workspaceTemplate.spec.image (or the operator's --run-image), that the "
    "node can reach its registry and the pull secrets of the Stack's ServiceAccount"
)
SCHEDULING_HINT = (
    "no node fits the run pod: check spec.workspaceTemplate.spec.resources.requests and "
    "the podTemplate's nodeSelector, affinity and tolerations"
)

DISRUPTIONS = {
    "EvictionByEvictionAPI": "Evicted",
    "TerminationByKubelet": "Evicted",
    "PreemptionByScheduler": "Preempted",
}
"""A ``DisruptionTarget`` condition's reason -> the run's failure reason (else its own)."""


def name(pod: Pod) -> str:
    """The pod's name."""
    return str(pod["metadata"]["name"])


def uid(pod: Pod) -> str:
    """The pod's uid ("" when the API has not given it one yet)."""
    return str(pod["metadata"].get("uid") or "")


def resource_version(pod: Pod) -> str:
    """The pod's resourceVersion ("" when absent)."""
    return str(pod["metadata"].get("resourceVersion") or "")


def labels(pod: Pod) -> Mapping[str, str]:
    """The pod's labels."""
    found: Mapping[str, str] = pod["metadata"].get("labels") or {}
    return found


def annotation(pod: Pod, key: str) -> str | None:
    """The pod's annotation ``key``, or None."""
    found = (pod["metadata"].get("annotations") or {}).get(key)
    return str(found) if found is not None else None


def created_at(pod: Pod) -> datetime | None:
    """When the API server created the pod."""
    return parse_time(pod["metadata"].get("creationTimestamp"))


def is_operators(pod: Pod) -> bool:
    """Whether this operator created the pod (its managed-by label)."""
    return labels(pod).get(podspec.LABEL_MANAGED_BY) == podspec.MANAGED_BY


def is_stacks(pod: Pod, job: RunJob) -> bool:
    """Whether the pod is a run pod of ``job``'s Stack (any generation or operation)."""
    return is_operators(pod) and labels(pod).get(podspec.LABEL_STACK_UID) == job.owner.uid


def is_run(pod: Pod, job: RunJob, operation: str) -> bool:
    """Whether ``pod`` is this run's: this Stack's, generation, commit and operation.

    Never a pod whose outcome was taken already (kept for ``Retain``: ``concluded``): a
    later run of the same generation, commit and operation is another run.
    """
    return (
        is_stacks(pod, job)
        and annotation(pod, podspec.ANNOTATION_GENERATION) == str(job.generation)
        and annotation(pod, podspec.ANNOTATION_COMMIT) == job.commit
        and annotation(pod, podspec.ANNOTATION_OPERATION) == operation
        and not pod["metadata"].get("deletionTimestamp")
        and not concluded(pod)
    )


def concluded(pod: Pod) -> bool:
    """Whether the operator took the pod's outcome and kept the pod (``Retain``)."""
    return annotation(pod, podspec.ANNOTATION_CONCLUDED) is not None


def status(pod: Pod) -> Mapping[str, Any]:
    """The pod's status (empty when absent)."""
    found: Mapping[str, Any] = pod.get("status") or {}
    return found


def finished(pod: Pod) -> bool:
    """Whether the pod's phase is final (Succeeded or Failed)."""
    return status(pod).get("phase") in ("Succeeded", "Failed")


def container_state(pod: Pod, *, init: bool = False) -> Mapping[str, Any]:
    """The state of the run container (``init``: of the checkout init container)."""
    field, container = (
        ("initContainerStatuses", podspec.CHECKOUT)
        if init
        else ("containerStatuses", podspec.CONTAINER)
    )
    for entry in status(pod).get(field) or ():
        if entry.get("name") == container:
            state: Mapping[str, Any] = entry.get("state") or {}
            return state
    return {}


def container_started(pod: Pod) -> bool:
    """Whether the run container has started (it runs or has ended)."""
    state = container_state(pod)
    return bool(state.get("running") or state.get("terminated"))


def container_terminated(pod: Pod) -> bool:
    """Whether the run container has ended."""
    return bool(container_state(pod).get("terminated"))


def container_started_at(pod: Pod) -> datetime | None:
    """When the run container started, if it has."""
    state = container_state(pod)
    running = state.get("running") or state.get("terminated") or {}
    return parse_time(running.get("startedAt"))


def cannot_start(pod: Pod) -> tuple[str, str] | None:
    """(reason, message) of a container the kubelet cannot start; None otherwise."""
    for init in (True, False):
        waiting = container_state(pod, init=init).get("waiting") or {}
        if waiting.get("reason") in CANNOT_START:
            where = "the checkout container: " if init else ""
            text = where + str(waiting.get("message") or "")
            if waiting["reason"] in IMAGE_REASONS:
                text = f"{text}; {IMAGE_HINT}"
            return str(waiting["reason"]), text
    if finished(pod) and not container_started(pod):
        return terminated_reason(pod)
    return None


def pending_reason(pod: Pod) -> str:
    """Why the pod's container has not started: unscheduled (why, and what to check), or not yet."""
    scheduled = condition(pod, "PodScheduled")
    if scheduled is not None and scheduled.get("status") != "True":
        why = f"{scheduled.get('reason')}: {scheduled.get('message')}"
        return f"not scheduled: {why}; {SCHEDULING_HINT}"
    return "its container did not start in time"


def condition(pod: Pod, type_: str) -> Mapping[str, Any] | None:
    """The pod's condition ``type_``, or None."""
    for condition in status(pod).get("conditions") or ():
        if condition.get("type") == type_:
            found: Mapping[str, Any] = condition
            return found
    return None


def disruption(pod: Pod) -> tuple[str, str] | None:
    """(reason, message) of the pod's ``DisruptionTarget`` condition: who is ending it.

    Set by the API server (an eviction), the scheduler (a preemption) or the kubelet
    before they end the pod; None when it has none.
    """
    target = condition(pod, "DisruptionTarget")
    if target is None or target.get("status") != "True":
        return None
    raw = str(target.get("reason") or "")
    reason = DISRUPTIONS.get(raw, raw or "Disrupted")
    detail = f"{raw}: {target.get('message') or ''}".rstrip(": ")
    return reason, f"{detail}; the run is retried with backoff"


def container_reason(pod: Pod) -> str | None:
    """Why the run container ended (``OOMKilled``, ``Error``, ``Completed``); None if it runs."""
    terminated = container_state(pod).get("terminated")
    return str(terminated.get("reason") or "") if terminated else None


def memory_limit(pod: Pod) -> str | None:
    """The run container's memory limit as the pod's spec says (a quantity), or None."""
    for container in (pod.get("spec") or {}).get("containers") or ():
        if container.get("name") == podspec.CONTAINER:
            limits = (container.get("resources") or {}).get("limits") or {}
            found = limits.get("memory")
            return str(found) if found is not None else None
    return None


def oom_hint(pod: Pod) -> str:
    """What an OOM-killed run pod should have: more memory (its limit named)."""
    limit = memory_limit(pod)
    held = f"its memory limit ({limit})" if limit else "the memory it may use"
    return (
        f"the run container used more than {held}; raise "
        "spec.workspaceTemplate.spec.resources.limits.memory"
    )


def terminated_reason(pod: Pod) -> tuple[str, str]:
    """The pod's own reason for ending, and what to do about it.

    The pod's (Evicted, DeadlineExceeded), who disrupted it (``disruption``: an eviction
    through the API), the container's (OOMKilled, saying which limit to raise).

    ``("Unknown", "")`` when the pod says nothing.
    """
    found = status(pod)
    if found.get("reason"):
        return str(found["reason"]), str(found.get("message") or "")
    disrupted = disruption(pod)
    if disrupted is not None:
        return disrupted
    terminated = container_state(pod).get("terminated")
    if terminated:
        reason = str(terminated.get("reason") or "Error")
        detail = f"exit code {terminated.get('exitCode')}"
        if terminated.get("message"):
            detail += f": {terminated['message']}"
        if reason == "OOMKilled":
            detail += f"; {oom_hint(pod)}"
        return reason, detail
    checkout = container_state(pod, init=True).get("terminated")
    if checkout and checkout.get("exitCode"):
        detail = f"the checkout container: exit code {checkout.get('exitCode')}"
        if checkout.get("message"):
            detail += f": {checkout['message']}"
        return str(checkout.get("reason") or "Error"), detail
    return "Unknown", ""
