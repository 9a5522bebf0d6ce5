"""``--runner=pod`` on the real node: each run is a pod of its own, as the Stack's SA.

Each run pod runs the operator's image, in the Stack's namespace.

The operator is deployed from ``manifests/default`` with ``--runner=pod``. Each tenant
namespace gets a claim on the host state directory, which its Stacks mount into their run
pods through ``workspaceTemplate`` (a file backend that outlives every pod); the operator's
own pod has no such volume: whatever a Stack does happens in its run pod.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from reconcile.tenancy import RUNNER_LABEL
from testbed.git_server import GitServer
from testbed.node import deployment
from testbed.node.deployment import NAMESPACE
from testbed.waits import wait_for
from tests.e2e.conftest import Program, Sentinels, Stacks, find
from tests.e2e.waits import wait_mid_step
from tests.node.fixtures import CLAIM

pytestmark = [pytest.mark.node, pytest.mark.image, pytest.mark.e2e]

# Stack names here are the node tests' alone: every tenant's file backend is the same state
# directory, and a Stack of the same name elsewhere (with another passphrase) shares its
# backend stack.
POD_WEB = "pod-web"


def pod_stack(stacks: Stacks, name: str, program: Program, **config: str) -> dict[str, Any]:
    """A Stack of the files program whose run pods mount the state claim at ``/state``."""
    body = stacks.manifest(
        name,
        program,
        backend="file:///state/backend",
        config={"path": f"/state/{name}.txt", "content": "one", **config},
    )
    body["spec"]["workspaceTemplate"] = deployment.state_workspace(CLAIM)
    return body


def run_pod(stacks: Stacks, name: str) -> dict[str, Any] | None:
    """The Stack's run pod as the API serves it, or None."""
    try:
        response: Any = stacks.core.read_namespaced_pod(
            f"{name}-pulumi", stacks.namespace, _preload_content=False
        )
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    pod: dict[str, Any] = json.loads(response.data)
    return pod


def running(stacks: Stacks, name: str) -> dict[str, Any] | None:
    """The run pod once its container runs, else None."""
    pod = run_pod(stacks, name)
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    return pod if any("running" in (s.get("state") or {}) for s in statuses) else None


def reasons(stacks: Stacks, name: str) -> list[str | None]:
    """Ready's reason in every status version the watch saw."""
    assert stacks.watcher is not None
    return [(find(v, "Ready") or {}).get("reason") for v in stacks.watcher.versions(name)]


def test_a_stack_runs_in_a_pod_of_its_own_as_its_service_account(
    node_cluster: Any,
    pod_tenant: Stacks,
    node_git: GitServer,
    tmp_path: Path,
    sentinels: Sentinels,
    state: Path,
) -> None:
    """The run pod: the Stack's SA, restricted, Secrets by reference; Ready; then gone."""
    core = pod_tenant.core
    # Opted in by the namespace's admin: Stacks may run as it.
    opted_in = client.V1ObjectMeta(name="deployer", labels={RUNNER_LABEL: "true"})
    core.create_namespaced_service_account(
        pod_tenant.namespace, client.V1ServiceAccount(metadata=opted_in)
    )
    pod_tenant.secret("app", {"token": sentinels.secret_config})
    program = Program(node_git, tmp_path)
    body = pod_stack(pod_tenant, POD_WEB, program, delay="3")
    body["spec"]["serviceAccountName"] = "deployer"
    body["spec"]["secretsRef"] = {
        "token": {"type": "Secret", "secret": {"name": "app", "key": "token"}}
    }
    pod_tenant.create(body)
    pod = wait_for(lambda: running(pod_tenant, POD_WEB), "the run pod to run", timeout=240)
    spec = pod["spec"]
    [container] = spec["containers"]
    assert spec["serviceAccountName"] == "deployer"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["image"] == deployment_image(node_cluster)
    refs = [e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e]
    assert {"name": "app", "key": "token"} in refs
    for value in sentinels.values():
        assert value not in json.dumps(pod), "a secret value is in the run pod's spec"

    ready = pod_tenant.wait_ready(POD_WEB, timeout=240)
    assert ready["status"]["outputs"]["content"] == "one"
    assert ready["status"]["outputs"]["secretContent"] == "[secret]"
    assert (state / f"{POD_WEB}.txt").read_text() == "one"
    wait_for(lambda: run_pod(pod_tenant, POD_WEB) is None, "the run pod to be deleted", 60)

    pod_tenant.patch(POD_WEB, {"spec": {"config": {"content": "two", "delay": "0"}}})
    pod_tenant.wait_ready(POD_WEB, timeout=240)
    assert (state / f"{POD_WEB}.txt").read_text() == "two"
    pod_tenant.wait_events(POD_WEB, "UpdateStarted", "Succeeded")
    metrics = deployment.metrics_through_service(node_cluster)
    assert "pulumi_stack_run_pods_created_total 2.0" in metrics
    exposed = {
        "status": json.dumps([s.get("status") for s in pod_tenant.listing()]),
        "events": json.dumps(
            [e.to_dict() for e in core.list_namespaced_event(pod_tenant.namespace).items],
            default=str,
        ),
        "logs": deployment.logs(node_cluster),
        "metrics": metrics,
    }
    for where, text in exposed.items():
        for value in sentinels.values():
            assert value not in text, f"a secret value leaked into the {where}"


def deployment_image(node_cluster: Any) -> str:
    """The image the operator's own container runs."""
    [pod] = deployment.ready_pods(node_cluster)
    return str(pod["spec"]["containers"][0]["image"])


def test_a_deleted_run_pod_is_concluded_as_runner_failed(
    pod_tenant: Stacks, node_git: GitServer, tmp_path: Path, state: Path
) -> None:
    """A run pod killed mid-update: RunnerFailed naming the pod; the dead lock is released.

    The create's delay only has to outlast the deletion; the failed generation is retried
    at once with it, before the next one runs, so a longer delay is waited for in vain.
    """
    program = Program(node_git, tmp_path)
    pod_tenant.create(pod_stack(pod_tenant, "doomed", program, delay="30"))
    wait_mid_step(state / "backend", "doomed", "creating file", timeout=240)
    pod_tenant.core.delete_namespaced_pod(
        "doomed-pulumi", pod_tenant.namespace, grace_period_seconds=0
    )
    # Seen in the watch: the failure is retried at once, so it may last less than a poll.
    failed = pod_tenant.wait_seen("doomed", "Ready", "RunnerFailed", timeout=180)
    message = find(failed, "Ready")["message"]  # type: ignore[index]
    assert f"{pod_tenant.namespace}/doomed-pulumi" in message
    assert "Deleted" in message
    pod_tenant.wait_events("doomed", "RunnerFailed")
    # The next run (a new generation, no delay) releases the killed run's lock itself.
    pod_tenant.patch("doomed", {"spec": {"config": {"delay": "0", "content": "again"}}})
    pod_tenant.wait_ready("doomed", timeout=240)
    assert (state / "doomed.txt").read_text() == "again"


def test_an_operator_restart_reattaches_to_the_run_pod(
    node_cluster: Any, pod_tenant: Stacks, node_git: GitServer, tmp_path: Path, state: Path
) -> None:
    """A rollout mid-run: the run pod goes on; the new operator concludes it, no rerun."""
    program = Program(node_git, tmp_path)
    pod_tenant.create(pod_stack(pod_tenant, "steady", program, delay="40"))
    wait_mid_step(state / "backend", "steady", "creating file", timeout=240)
    before = run_pod(pod_tenant, "steady")
    assert before is not None
    [old] = deployment.ready_pods(node_cluster)
    node_cluster.kubectl("rollout", "restart", f"deployment/{deployment.NAME}", "-n", NAMESPACE)
    ready = pod_tenant.wait_ready("steady", timeout=300)
    assert ready["status"]["outputs"]["content"] == "one"
    seen = reasons(pod_tenant, "steady")
    assert "Interrupted" not in seen, seen
    started = [e for e in pod_tenant.events("steady") if e.reason == "UpdateStarted"]
    assert len(started) == 1, "the run was attached to, not run again"
    [new] = deployment.ready_pods(node_cluster)
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert (state / "steady.txt").read_text() == "one"
