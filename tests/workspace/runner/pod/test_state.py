"""``pod.state``: why a run pod ended or never started, and what the user can change.

Pods here are the API's JSON as the kubelet, the scheduler and the API server leave them
after each fault the node tests play for real (``tests/node/test_run_pod_faults.py``).
"""

from __future__ import annotations

from typing import Any

from workspace.runner.pod import state as podstate


def pod(status: dict[str, Any], limits: dict[str, str] | None = None) -> dict[str, Any]:
    """A run pod with ``status``; its run container has ``limits``."""
    container: dict[str, Any] = {"name": "pulumi"}
    if limits is not None:
        container["resources"] = {"limits": limits}
    return {
        "metadata": {"name": "web-pulumi"},
        "spec": {"containers": [container]},
        "status": status,
    }


def terminated(reason: str, code: int) -> list[dict[str, Any]]:
    """The run container's status, ended for ``reason`` with exit ``code``."""
    return [{"name": "pulumi", "state": {"terminated": {"reason": reason, "exitCode": code}}}]


def test_an_eviction_through_the_api_reads_as_evicted() -> None:
    """The DisruptionTarget condition the API server sets names the eviction."""
    target = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting",
    }
    status = {
        "phase": "Running",
        "conditions": [target],
        "containerStatuses": terminated("Error", 143),
    }
    reason, message = podstate.terminated_reason(pod(status))
    assert reason == "Evicted"
    assert message.startswith("EvictionByEvictionAPI: Eviction API: evicting")
    assert "retried" in message


def test_a_pods_own_reason_comes_before_a_disruption() -> None:
    """The kubelet's Evicted (node pressure), with its message, wins."""
    target = {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}
    status = {
        "phase": "Failed",
        "reason": "Evicted",
        "message": "low memory",
        "conditions": [target],
    }
    assert podstate.terminated_reason(pod(status)) == ("Evicted", "low memory")


def test_an_oom_kill_names_the_limit_to_raise() -> None:
    """OOMKilled: the container's memory limit and the field that sets it."""
    status = {"phase": "Failed", "containerStatuses": terminated("OOMKilled", 137)}
    reason, message = podstate.terminated_reason(pod(status, {"memory": "400Mi"}))
    assert reason == "OOMKilled"
    assert "exit code 137" in message
    assert "its memory limit (400Mi)" in message
    assert "spec.workspaceTemplate.spec.resources.limits.memory" in message


def test_an_oom_kill_without_a_limit_still_says_what_to_set() -> None:
    """No limit in the spec (a LimitRange's default, or the node's memory)."""
    status = {"phase": "Failed", "containerStatuses": terminated("OOMKilled", 137)}
    _, message = podstate.terminated_reason(pod(status))
    assert "the memory it may use" in message


def test_an_image_that_cannot_be_pulled_names_the_setting() -> None:
    """ErrImagePull in the checkout container: the kubelet's message and the image setting."""
    waiting = {"reason": "ErrImagePull", "message": 'failed to pull "x:1": not found'}
    status = {
        "phase": "Pending",
        "initContainerStatuses": [{"name": "checkout", "state": {"waiting": waiting}}],
    }
    reason, message = podstate.cannot_start(pod(status)) or ("", "")
    assert reason == "ErrImagePull"
    assert message.startswith('the checkout container: failed to pull "x:1": not found')
    assert "spec.workspaceTemplate.spec.image" in message


def test_a_missing_secret_has_no_image_hint() -> None:
    """CreateContainerConfigError is the kubelet's word alone."""
    waiting = {"reason": "CreateContainerConfigError", "message": 'secret "app" not found'}
    status = {"containerStatuses": [{"name": "pulumi", "state": {"waiting": waiting}}]}
    assert podstate.cannot_start(pod(status)) == (
        "CreateContainerConfigError",
        'secret "app" not found',
    )


def test_an_unscheduled_pod_says_what_to_check() -> None:
    """The scheduler's reason, then the template fields that decide where a pod fits."""
    scheduled = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/1 nodes are available",
    }
    text = podstate.pending_reason(pod({"phase": "Pending", "conditions": [scheduled]}))
    assert text.startswith("not scheduled: Unschedulable: 0/1 nodes are available; ")
    assert "nodeSelector" in text
    assert "resources.requests" in text
    assert podstate.pending_reason(pod({"phase": "Pending"})) == (
        "its container did not start in time"
    )
