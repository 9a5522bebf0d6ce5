"""``--runner=pod`` on the real node: what the namespace admits, and a namespace deleted.

A ResourceQuota or a LimitRange that refuses the run pod (403 at its creation), a namespace
that enforces the restricted Pod Security Standard, and the Stack's namespace deleted while
its run pod runs. A refusal is Ready=False RunnerFailed naming the quota or the limit and
what to change, in Ready, ``status.lastUpdate``, a Warning Event and the pod-failure
counter (``CreateRefused``) alike (``tests.node.faults``); it is retried with backoff and
converges once the namespace admits the pod.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from testbed.git_server import GitServer
from testbed.waits import wait_for
from tests.e2e.conftest import Program, Stacks
from tests.node.faults import (
    CREATED,
    FAILED,
    counter,
    fault_stack,
    faulted,
    metrics,
    template,
    wait_counted,
)
from tests.node.test_pod_runner import running

pytestmark = [pytest.mark.node, pytest.mark.image, pytest.mark.e2e]

REFUSED = "CreateRefused"


def failures(stacks: Stacks, name: str) -> int:
    """The most consecutive failures ``status.lastUpdate`` recorded in any version seen."""
    assert stacks.watcher is not None
    counts = [
        int(((v.get("status") or {}).get("lastUpdate") or {}).get("failures") or 0)
        for v in stacks.watcher.versions(name)
    ]
    return max(counts, default=0)


def test_a_quota_that_forbids_the_run_pod_is_named_and_retried_until_raised(
    node_cluster: Any, pod_tenant: Stacks, node_git: GitServer, tmp_path: Path, state: Path
) -> None:
    """``pods: 0``: RunnerFailed naming the quota, retried; raised, the next retry converges.

    The create is refused (403) before any pod exists: nothing ran, nothing is lost. The
    raised quota bounds requests, so it admits only pods that request CPU and memory: the
    run pod does, with the operator's default requests.
    """
    before = metrics(node_cluster)
    quota = client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="no-run-pods"),
        spec=client.V1ResourceQuotaSpec(hard={"pods": "0"}),
    )
    pod_tenant.core.create_namespaced_resource_quota(pod_tenant.namespace, quota)
    pod_tenant.create(fault_stack(pod_tenant, "quota", Program(node_git, tmp_path)))
    fault = faulted(pod_tenant, node_cluster, "quota", "RunnerFailed", "no-run-pods", 180)
    fault.assert_says("RunnerFailed", "exceeded quota: no-run-pods", "raise or lift it")
    wait_for(lambda: failures(pod_tenant, "quota") >= 2, "a retry refused too", 60)
    wait_counted(node_cluster, before, FAILED, grown=2, reason=REFUSED)
    raised = {"pods": "5", "requests.cpu": "1", "requests.memory": "1Gi"}
    pod_tenant.core.patch_namespaced_resource_quota(
        "no-run-pods", pod_tenant.namespace, {"spec": {"hard": raised}}
    )
    pod_tenant.wait_ready("quota", timeout=300)
    assert (state / "quota.txt").read_text() == "one"
    created = counter(metrics(node_cluster), CREATED) - counter(before, CREATED)
    assert created == 1, "only the run after the quota was raised had a pod"


def test_a_limit_range_gives_run_pods_its_defaults_and_refuses_past_its_max(
    node_cluster: Any, pod_tenant: Stacks, node_git: GitServer, tmp_path: Path, state: Path
) -> None:
    """Its default limits fill a run pod that sets none (it runs); past the max it is refused.

    The requests are the operator's defaults, which come before the LimitRange's.

    The refusal names the LimitRange's maximum and the setting; lowered, it converges.
    """
    before = metrics(node_cluster)
    item = client.V1LimitRangeItem(
        type="Container",
        default={"memory": "1Gi", "cpu": "2"},
        default_request={"memory": "128Mi", "cpu": "100m"},
        max={"memory": "2Gi"},
    )
    limits = client.V1LimitRange(
        metadata=client.V1ObjectMeta(name="run-limits"),
        spec=client.V1LimitRangeSpec(limits=[item]),
    )
    pod_tenant.core.create_namespaced_limit_range(pod_tenant.namespace, limits)
    program = Program(node_git, tmp_path)
    pod_tenant.create(fault_stack(pod_tenant, "defaulted", program, delay="3"))
    pod = wait_for(lambda: running(pod_tenant, "defaulted"), "the run pod to run", 240)
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"memory": "1Gi", "cpu": "2"}, resources
    assert resources["requests"] == {"memory": "256Mi", "cpu": "100m"}, resources
    pod_tenant.wait_ready("defaulted", timeout=240)

    body = fault_stack(pod_tenant, "greedy", program)
    template(body)["resources"] = {"limits": {"memory": "4Gi"}}
    pod_tenant.create(body)
    fault = faulted(pod_tenant, node_cluster, "greedy", "RunnerFailed", "per Container", 180)
    fault.assert_says("RunnerFailed", "maximum memory usage per Container is 2Gi", "LimitRange")
    wait_counted(node_cluster, before, FAILED, reason=REFUSED)
    lowered = {"resources": {"limits": {"memory": "1Gi"}}}
    pod_tenant.patch("greedy", {"spec": {"workspaceTemplate": {"spec": lowered}}})
    pod_tenant.wait_ready("greedy", timeout=300)
    assert (state / "greedy.txt").read_text() == "one"


def test_a_restricted_namespace_admits_run_pods_of_the_default_profile(
    node_cluster: Any, pod_tenant: Stacks, node_git: GitServer, tmp_path: Path, state: Path
) -> None:
    """``pod-security.kubernetes.io/enforce=restricted``: the run pod is admitted; Ready."""
    labels = {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }
    pod_tenant.core.patch_namespace(pod_tenant.namespace, {"metadata": {"labels": labels}})
    before = metrics(node_cluster)
    pod_tenant.create(fault_stack(pod_tenant, "restricted", Program(node_git, tmp_path)))
    ready = pod_tenant.wait_ready("restricted", timeout=240)
    assert ready["status"]["outputs"]["content"] == "one"
    assert (state / "restricted.txt").read_text() == "one"
    reasons = [e.reason for e in pod_tenant.events("restricted")]
    assert "RunnerFailed" not in reasons, reasons
    after = metrics(node_cluster)
    assert counter(after, FAILED, reason=REFUSED) == counter(before, FAILED, reason=REFUSED)
