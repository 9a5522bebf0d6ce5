"""The operator's image, deployed from ``manifests/default``, running on the real test node.

The image is the one ``make image`` builds; the node runs it as users' clusters do
(kubelet, containerd, kube-proxy). Stacks take their program from a git server on the
host and keep their state in a host directory mounted into the pod (a file backend that
outlives any pod), so that restarts, deletions and failover can be checked against it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from testbed.git_server import GitServer
from testbed.node import deployment
from testbed.node.deployment import NAMESPACE, UID
from testbed.waits import wait_for
from tests.e2e.conftest import Program, Sentinels, Stacks, find, is_ready
from tests.e2e.waits import wait_mid_step

pytestmark = [pytest.mark.node, pytest.mark.image, pytest.mark.e2e]


def stack_manifest(stacks: Stacks, name: str, program: Program, **config: str) -> dict[str, Any]:
    """A Stack of the files program, as the pod sees the state directory."""
    return stacks.manifest(
        name,
        program,
        backend="file:///state/backend",
        config={"path": f"/state/{name}.txt", "content": "one", **config},
    )


def test_deployment_rolls_out_as_the_manifests_say(
    node_cluster: Any, image_ref: str, tmp_path: Path
) -> None:
    """Only the image swapped: probes pass, uid 65532, read-only root, Lease, /metrics."""
    deployment.deploy(node_cluster, deployment.write_overlay(tmp_path / "overlay", image_ref))
    [pod] = deployment.ready_pods(node_cluster)
    name = pod["metadata"]["name"]
    spec = pod["spec"]["containers"][0]
    assert spec["image"] == image_ref
    # Its own PriorityClass, above every run pod (whose classes --allowed-priority-classes
    # limits, to none by default): a tenant's run pod never preempts it.
    assert pod["spec"]["priorityClassName"] == deployment.NAME
    assert pod["spec"]["priority"] == 1_000_000
    pid = deployment.container_process(pod)
    assert deployment.process_uid(pid) == UID
    assert "ro" in deployment.root_mount_options(pid)
    # /var/run is a link to /run in the image; /proc/<pid>/root would resolve it on the host.
    token = Path(f"/proc/{pid}/root/run/secrets/kubernetes.io/serviceaccount/token")
    assert token.read_text().count(".") == 2, "the ServiceAccount token is mounted"
    wait_for(
        lambda: deployment.lease_holder(node_cluster).startswith(f"{name}_"),
        f"{name} to take the Lease",
        timeout=60,
    )
    metrics = deployment.metrics_through_service(node_cluster)
    assert 'leader_election_master_status{name="pulumi-stack-operator"} 1.0' in metrics


def test_stack_converges_in_the_pod_and_nothing_secret_leaks(
    node_cluster: Any,
    stack_overlay: Path,
    tenant: Stacks,
    node_git: GitServer,
    tmp_path: Path,
    sentinels: Sentinels,
    state: Path,
) -> None:
    """Ready with outputs, a config change applied, no sentinel in status/Events/logs/metrics."""
    deployment.deploy(node_cluster, stack_overlay)
    program = Program(node_git, tmp_path)
    tenant.secret("app", {"token": sentinels.secret_config})
    body = stack_manifest(tenant, "web", program)
    body["spec"]["secretsRef"] = {
        "token": {"type": "Secret", "secret": {"name": "app", "key": "token"}}
    }
    tenant.create(body)
    ready = tenant.wait_ready("web", timeout=240)
    assert ready["status"]["outputs"]["content"] == "one"
    assert ready["status"]["outputs"]["secretContent"] == "[secret]"
    assert (state / "web.txt").read_text() == "one"

    tenant.patch("web", {"spec": {"config": {"content": "two"}}})
    tenant.wait_ready("web", timeout=180)
    assert (state / "web.txt").read_text() == "two"

    tenant.wait_events("web", "UpdateStarted", "Succeeded")
    exposed = {
        "status": json.dumps([s.get("status") for s in tenant.listing()]),
        "events": json.dumps(
            [e.to_dict() for e in tenant.core.list_namespaced_event(tenant.namespace).items],
            default=str,
        ),
        "logs": deployment.logs(node_cluster),
        "metrics": deployment.metrics_through_service(node_cluster),
    }
    for where, text in exposed.items():
        for value in sentinels.values():
            assert value not in text, f"a secret value leaked into the {where}"
    assert "web" in exposed["logs"], "the scan read the operator's real logs"


@pytest.mark.parametrize("how", ["rollout restart", "delete pod"])
def test_an_update_cut_short_by_the_pod_is_concluded_honestly(
    node_cluster: Any,
    stack_overlay: Path,
    tenant: Stacks,
    node_git: GitServer,
    tmp_path: Path,
    state: Path,
    how: str,
) -> None:
    """A slow update interrupted by a restart: status says so, then the new pod converges."""
    deployment.deploy(node_cluster, stack_overlay)
    program = Program(node_git, tmp_path)
    name = f"slow-{how.split(maxsplit=1)[0]}"
    tenant.create(stack_manifest(tenant, name, program, delay="30"))
    # The lock names the CLI's pid inside the pod: wait on the checkpoint instead, which
    # records the step as pending while the provider runs it.
    wait_mid_step(state / "backend", name, "creating file", timeout=180)
    [old] = deployment.ready_pods(node_cluster)
    if how == "rollout restart":
        node_cluster.kubectl("rollout", "restart", f"deployment/{deployment.NAME}", "-n", NAMESPACE)
    else:
        node_cluster.kubectl(
            "delete",
            "pod",
            "-n",
            NAMESPACE,
            old["metadata"]["name"],
            "--grace-period=1",
            "--wait=false",
        )
    tenant.wait_ready(name, timeout=300)
    assert (state / f"{name}.txt").read_text() == "one"
    # The cut-short run was concluded as such (by the old pod on its way out, or by the new
    # one when the old died without a word) before it ran again.
    assert tenant.watcher is not None
    seen = [(find(v, "Ready") or {}).get("reason") for v in tenant.watcher.versions(name)]
    assert "Interrupted" in seen, seen
    assert seen.index("Interrupted") < len(seen) - 1
    tenant.wait_events(name, "Interrupted", "Succeeded")
    [new] = deployment.ready_pods(node_cluster)
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert deployment.lease_holder(node_cluster).startswith(new["metadata"]["name"] + "_")
    assert not tenant.locks(), "the interrupted run's lock was released"


def test_the_standby_takes_over_when_the_leader_dies(
    node_cluster: Any,
    stack_overlay: Path,
    tenant: Stacks,
    node_git: GitServer,
    tmp_path: Path,
    state: Path,
) -> None:
    """Two replicas, the leader force-deleted: the standby takes the Lease and reconciles.

    The node is cordoned first, so the replacement pod cannot be scheduled and race the
    standby for the Lease: only the standby can take over, as when a leader's node fails.
    """
    deployment.deploy(node_cluster, stack_overlay)
    scale = ("scale", f"deployment/{deployment.NAME}", "-n", NAMESPACE)
    node_cluster.kubectl(*scale, "--replicas=2")
    try:
        deployment.rollout(node_cluster)
        wait_for(lambda: len(deployment.ready_pods(node_cluster)) == 2, "two ready pods", 120)
        program = Program(node_git, tmp_path)
        tenant.create(stack_manifest(tenant, "failover", program))
        tenant.wait_ready("failover", timeout=240)
        leader = deployment.lease_holder(node_cluster).split("_")[0]  # <pod>_<pid>_<hex>
        [standby] = [
            p["metadata"]["name"]
            for p in deployment.ready_pods(node_cluster)
            if p["metadata"]["name"] != leader
        ]
        node_cluster.kubectl("cordon", node_cluster.node_name)
        node_cluster.kubectl(
            "delete", "pod", "-n", NAMESPACE, leader, "--grace-period=0", "--force", "--wait=false"
        )
        wait_for(
            lambda: deployment.lease_holder(node_cluster).startswith(f"{standby}_"),
            f"the standby {standby} to take the Lease",
            timeout=120,
        )
        tenant.patch("failover", {"spec": {"config": {"content": "after-failover"}}})
        obj = tenant.wait_ready("failover", timeout=180)
        assert is_ready(obj)
        assert (state / "failover.txt").read_text() == "after-failover"
    finally:
        # Back to one replica while the node is still cordoned: the ReplicaSet drops the
        # replacement pod before it is ever scheduled. Uncordoned first, the replacement
        # started and was deleted seconds into its start, and the kubelet then took
        # minutes to stop it (full20: the next test's deploy waited 240 s for it in vain).
        node_cluster.kubectl(*scale, "--replicas=1")
        wait_for(
            lambda: len(deployment.pods(node_cluster)) == 1,
            "the unscheduled replacement pod dropped",
            timeout=60,
            detail=lambda: deployment.leaving(node_cluster),
        )
        node_cluster.kubectl("uncordon", node_cluster.node_name)
        deployment.rollout(node_cluster)
