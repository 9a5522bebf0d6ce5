"""``--runner=pod`` on the real node: run pods evicted, OOM-killed, unscheduled, unpullable.

Each fault is concluded once (no second run for it behind the Stack's back), as Ready=False
with a reason and a message saying what to change; Ready, ``status.lastUpdate``, a Warning
Event and the pod-failure counter agree (``tests.node.faults``). The next run, after the
backoff or the fix, converges: nothing the program wrote is lost.

The faults the API server refuses at the pod's creation (quota, LimitRange, Pod Security,
a namespace being deleted) are in ``test_run_pod_admission``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from testbed.git_server import GitServer
from testbed.waits import wait_for
from tests.e2e.conftest import Program, Stacks
from tests.e2e.waits import wait_mid_step
from tests.node.faults import (
    CREATED,
    FAILED,
    counter,
    fault_stack,
    faulted,
    metrics,
    started,
    template,
)
from tests.node.faults import wait_counted as counted
from tests.node.test_pod_runner import run_pod, running

pytestmark = [pytest.mark.node, pytest.mark.image, pytest.mark.e2e]

MISSING_IMAGE = "localhost/pulumi-stack-operator/no-such-image:missing"
NO_NODE = {"pulumi-stack-operator.dev/no-such-node": "true"}


def test_an_evicted_run_pod_is_runner_failed_evicted_and_retried(
    node_cluster: Any, pod_tenant: Stacks, node_git: GitServer, tmp_path: Path, state: Path
) -> None:
    """The Eviction API mid-update: RunnerFailed; the retry converges, one run at a time.

    The message names the eviction (``Evicted: EvictionByEvictionAPI``, from the pod's
    ``DisruptionTarget`` condition, read before the runner deletes the pod), and so does
    the counter's reason.
    """
    before = metrics(node_cluster)
    program = Program(node_git, tmp_path)
    pod_tenant.create(fault_stack(pod_tenant, "evicted", program, delay="20"))
    wait_mid_step(state / "backend", "evicted", "creating file", timeout=240)
    pod = run_pod(pod_tenant, "evicted")
    assert pod is not None
    eviction = client.V1Eviction(
        metadata=client.V1ObjectMeta(name=pod["metadata"]["name"], namespace=pod_tenant.namespace)
    )
    pod_tenant.core.create_namespaced_pod_eviction(
        pod["metadata"]["name"], pod_tenant.namespace, eviction
    )
    said = ("failed: Evicted: EvictionByEvictionAPI",)
    fault = faulted(pod_tenant, node_cluster, "evicted", "RunnerFailed", said, 180)
    fault.assert_says("RunnerFailed", f"{pod_tenant.namespace}/evicted-pulumi")
    counted(node_cluster, before, FAILED, reason="Evicted")
    # Retried after the backoff, in a new pod, which completes the half-done update.
    ready = pod_tenant.wait_ready("evicted", timeout=300)
    assert ready["status"]["outputs"]["content"] == "one"
    assert (state / "evicted.txt").read_text() == "one"
    after = counted(node_cluster, before, CREATED, grown=2)
    assert counter(after, CREATED) - counter(before, CREATED) == 2, "a pod per run"
    assert started(pod_tenant, "evicted") == 2, "one run evicted, one retry: no other"


def test_an_oom_killed_run_pod_says_which_limit_to_raise(
    node_cluster: Any, pod_tenant: Stacks, node_git: GitServer, tmp_path: Path, state: Path
) -> None:
    """A program past its memory limit: Ready=False naming OOMKilled and the limit to raise."""
    before = metrics(node_cluster)
    program = Program(node_git, tmp_path)
    body = fault_stack(pod_tenant, "hungry", program, allocate="1024")
    template(body)["resources"] = {"limits": {"memory": "400Mi"}}
    pod_tenant.create(body)
    fault = faulted(pod_tenant, node_cluster, "hungry", "RunnerFailed", "OOMKilled", 300)
    fault.assert_says("RunnerFailed", "OOMKilled", "400Mi", "resources.limits.memory")
    counted(node_cluster, before, FAILED, reason="OOMKilled")
    assert not (state / "hungry.txt").exists()
    pod_tenant.patch("hungry", {"spec": {"config": {"allocate": "0"}}})
    pod_tenant.wait_ready("hungry", timeout=300)
    assert (state / "hungry.txt").read_text() == "one"


def test_a_run_pod_no_node_fits_is_not_started_before_the_runs_deadline(
    node_cluster: Any, pod_tenant: Stacks, node_git: GitServer, tmp_path: Path, state: Path
) -> None:
    """A nodeSelector no node has: NotStarted with the scheduler's reason; fixed, it converges.

    Within 80% of the run's deadline (``pod.START_SHARE``): not the deadline's
    UpdateTimedOut, which would not say why the pod never ran.
    """
    before = metrics(node_cluster)
    program = Program(node_git, tmp_path)
    body = fault_stack(pod_tenant, "homeless", program)
    body["spec"]["timeoutSeconds"] = 30  # the pod must start within 24 s
    template(body)["podTemplate"]["spec"]["nodeSelector"] = NO_NODE
    pod_tenant.create(body)
    wait_for(lambda: run_pod(pod_tenant, "homeless"), "the run pod", 120)
    fault = faulted(pod_tenant, node_cluster, "homeless", "RunnerFailed", "NotStarted", 120)
    fault.assert_says("RunnerFailed", "NotStarted", "not scheduled: Unschedulable", "nodeSelector")
    counted(node_cluster, before, FAILED, reason="NotStarted")
    spec = {"podTemplate": {"spec": {"nodeSelector": None}}}
    # The deadline goes too: it was there to bound the pod's start, not the fixed run.
    fixed = {"workspaceTemplate": {"spec": spec}, "timeoutSeconds": None}
    pod_tenant.patch("homeless", {"spec": fixed})
    pod_tenant.wait_ready("homeless", timeout=300)
    assert (state / "homeless.txt").read_text() == "one"


def test_a_workspace_image_that_cannot_be_pulled_says_which_image(
    node_cluster: Any, pod_tenant: Stacks, node_git: GitServer, tmp_path: Path, state: Path
) -> None:
    """A workspace image that does not exist: RunnerFailed naming it; fixed, it converges.

    The message names the image and the setting to change (ErrImagePull, or
    ImagePullBackOff when the kubelet had backed off already).
    """
    before = metrics(node_cluster)
    program = Program(node_git, tmp_path)
    body = fault_stack(pod_tenant, "imageless", program)
    template(body)["image"] = MISSING_IMAGE
    pod_tenant.create(body)
    fault = faulted(pod_tenant, node_cluster, "imageless", "RunnerFailed", MISSING_IMAGE, 180)
    fault.assert_says("RunnerFailed", MISSING_IMAGE, "spec.workspaceTemplate.spec.image")
    assert "ErrImagePull" in fault.message or "ImagePullBackOff" in fault.message
    grew = sum(
        counted_reason(fault.metrics, before, reason)
        for reason in ("ErrImagePull", "ImagePullBackOff")
    )
    assert grew >= 1
    assert run_pod(pod_tenant, "imageless") is None or not running(pod_tenant, "imageless")
    pod_tenant.patch("imageless", {"spec": {"workspaceTemplate": {"spec": {"image": None}}}})
    pod_tenant.wait_ready("imageless", timeout=300)
    assert (state / "imageless.txt").read_text() == "one"


def counted_reason(after: str, before: str, reason: str) -> float:
    """How much the pod-failure counter grew for ``reason`` from ``before`` to ``after``."""
    return counter(after, FAILED, reason=reason) - counter(before, FAILED, reason=reason)
