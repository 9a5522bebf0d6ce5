"""Node-daemon and control-plane faults under ``--runner=pod``: nothing lost, nothing twice.

Each test breaks one component while a run pod runs (``testbed.node.faults``), puts it
back whatever happens (``try``/``finally`` in the fault's context manager), and checks what
users see: the Stack ends Ready with the program's outcome (or Ready=False with a reason
naming what to do), exactly one ``UpdateStarted`` Event and one run pod per run, and the
Events, ``status.lastUpdate`` and the operator's metrics agreeing. The status watch of the
``pod_tenant`` fixture checks the status contract on every version it saw.

Run pods are counted by the scheduler's ``Scheduled`` Events (one per pod, whoever created
it, whatever operator process counted it) and, where the operator process is the same
throughout, by ``pulumi_stack_run_pods_created_total``.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from testbed.git_server import GitServer
from testbed.node import deployment
from testbed.node.cluster import NODE_MONITOR_GRACE
from testbed.node.deployment import NAMESPACE
from testbed.node.faults import NodeFaults
from testbed.waits import wait_for
from tests.e2e.conftest import Program, Stacks, find
from tests.e2e.waits import checkpoint, wait_mid_step
from tests.node.faults import counter, metrics, started
from tests.node.test_pod_runner import pod_stack, reasons, run_pod

pytestmark = [pytest.mark.node, pytest.mark.image, pytest.mark.e2e, pytest.mark.breaks_node]

DELAY = "20"  # seconds the program's one create takes: long enough to break something in
OUTAGE = 45.0  # seconds the kube-apiserver stays down at least


@pytest.fixture
def faults(node_cluster: Any, tmp_path: Path) -> Iterator[NodeFaults]:
    """The node cluster's fault injector; the operator's logs kept in ``tmp_path`` after."""
    yield NodeFaults(node_cluster)
    (tmp_path / "operator.log").write_text(deployment.logs(node_cluster))


# -- what every scenario checks --------------------------------------------------------------


def pods_created(node_cluster: Any) -> float:
    """``pulumi_stack_run_pods_created_total`` of the operator process serving now."""
    return counter(metrics(node_cluster), "pulumi_stack_run_pods_created")


def scheduled_pods(stacks: Stacks, name: str) -> set[str]:
    """The uids of the Stack's run pods that the scheduler placed (its Events say)."""
    events = stacks.core.list_namespaced_event(
        stacks.namespace, field_selector=f"involvedObject.name={name}-pulumi"
    ).items
    return {str(e.involved_object.uid) for e in events if e.reason == "Scheduled"}


def concluded_once(stacks: Stacks, name: str, content: str, timeout: float = 300) -> dict[str, Any]:
    """Ready with ``content`` from one run in one pod; Events and lastUpdate agree; the pod gone.

    Returns the Ready Stack. Fails if the watch ever saw a failure or interruption.
    """
    ready = stacks.wait_ready(name, timeout=timeout)
    assert ready["status"]["outputs"]["content"] == content
    last = ready["status"]["lastUpdate"]
    assert last["state"] == "succeeded", last
    events = stacks.wait_events(name, "UpdateStarted", "Succeeded", timeout=60)
    assert started(stacks, name) == 1, [(e.reason, e.message) for e in events]
    seen = reasons(stacks, name)
    assert not {"RunnerFailed", "Interrupted"} & set(seen), seen
    assert len(scheduled_pods(stacks, name)) == 1, "one run pod, not a second run"
    wait_for(lambda: run_pod(stacks, name) is None, f"{name}'s run pod to be deleted", 120)
    return ready


def wait_running(state: Path, name: str) -> None:
    """Wait until the Stack's update is inside its one create (the run pod's CLI works)."""
    wait_mid_step(state / "backend", name, "creating file", timeout=240)


# -- 1, 2: a node daemon restarted mid-run -------------------------------------------------


@pytest.mark.parametrize("daemon", ["kubelet", "containerd"])
def test_a_node_daemon_restarted_mid_run_loses_nothing(
    node_cluster: Any,
    pod_tenant: Stacks,
    node_git: GitServer,
    tmp_path: Path,
    state: Path,
    faults: NodeFaults,
    daemon: str,
) -> None:
    """Kubelet or containerd restarted mid-update: the run goes on and concludes once."""
    name = f"restart-{daemon}"
    before = pods_created(node_cluster)
    failures = counter(metrics(node_cluster), "pulumi_stack_run_pods_failed", reason="Deleted")
    pod_tenant.create(pod_stack(pod_tenant, name, Program(node_git, tmp_path), delay=DELAY))
    wait_running(state, name)
    uid = (run_pod(pod_tenant, name) or {})["metadata"]["uid"]
    faults.restart(daemon)
    concluded_once(pod_tenant, name, "one")
    assert scheduled_pods(pod_tenant, name) == {uid}
    assert (state / f"{name}.txt").read_text() == "one"
    assert pods_created(node_cluster) - before == 1
    after = counter(metrics(node_cluster), "pulumi_stack_run_pods_failed", reason="Deleted")
    assert after == failures


# -- 3: the node NotReady for longer than the run pod's grace ------------------------------

# The bound: kube-controller-manager marks the pod not Ready NODE_MONITOR_GRACE (the test
# bed's --node-monitor-grace-period, 15 s; 50 s in production) after the kubelet's last
# heartbeat; the run fails once that has lasted the pod's grace (65 s); then the next status
# write. Plus 45 s for the node controller's period, the watches and the reconcile.
NODE_BOUND = NODE_MONITOR_GRACE + 65 + 45


def seen_with_reason(stacks: Stacks, name: str, reason: str) -> Mapping[str, Any] | None:
    """The first version the watch saw with Ready's ``reason``, whatever its generation."""
    versions = stacks.watcher.versions(name) if stacks.watcher is not None else []
    found = (v for v in versions if (find(v, "Ready") or {}).get("reason") == reason)
    return next(found, None)


def test_a_node_not_ready_past_the_grace_concludes_the_run_and_frees_its_lock(
    node_cluster: Any,
    pod_tenant: Stacks,
    node_git: GitServer,
    tmp_path: Path,
    state: Path,
    faults: NodeFaults,
) -> None:
    """Kubelet stopped mid-update: RunnerFailed NodeNotReady within the bound, then a new run.

    The next run (a new generation, written while the node was down) takes the lost run's
    backend lock over: its pod has the lost one's hostname.
    """
    name = "lost-node"
    before = counter(metrics(node_cluster), "pulumi_stack_run_pods_failed", reason="NodeNotReady")
    pod_tenant.create(pod_stack(pod_tenant, name, Program(node_git, tmp_path), delay="300"))
    wait_running(state, name)
    first = (run_pod(pod_tenant, name) or {})["metadata"]["uid"]
    with faults.stopped("kubelet"):
        stopped = time.monotonic()
        pod_tenant.patch(name, {"spec": {"config": {"delay": "0", "content": "again"}}})
        failed = wait_for(
            lambda: seen_with_reason(pod_tenant, name, "RunnerFailed"),
            f"RunnerFailed within {NODE_BOUND}s of the kubelet's stop",
            NODE_BOUND,
        )
        took = time.monotonic() - stopped
    message = find(failed, "Ready")["message"]  # type: ignore[index]
    assert f"{pod_tenant.namespace}/{name}-pulumi failed: NodeNotReady" in message, message
    assert f"its node {node_cluster.node_name} has not been ready since" in message
    assert took > 65, f"concluded {took:.0f}s after the kubelet stopped, within the pod's grace"
    pod_tenant.wait_events(name, "RunnerFailed")
    ready = pod_tenant.wait_ready(name, timeout=300)
    assert ready["status"]["outputs"]["content"] == "again"
    assert ready["status"]["lastUpdate"]["state"] == "succeeded"
    assert (state / f"{name}.txt").read_text() == "again"
    assert started(pod_tenant, name) == 2, "the lost run and the next, nothing more"
    pods = scheduled_pods(pod_tenant, name)
    assert first in pods
    assert len(pods) == 2
    after = counter(metrics(node_cluster), "pulumi_stack_run_pods_failed", reason="NodeNotReady")
    assert after > before


# -- 4: the kube-apiserver down while run pods run ------------------------------------------


def finished_on_node(state: Path, names: list[str]) -> bool:
    """Whether every Stack's update has ended on the node: written, nothing pending."""
    backend = state / "backend"
    for name in names:
        latest = checkpoint(backend, name)
        resources = {r.get("urn", "").rsplit("::", 1)[-1] for r in latest.get("resources") or []}
        if latest.get("pending_operations") or "file" not in resources:
            return False
        if list((backend / ".pulumi" / "locks").glob(f"**/{name}/*.json")):
            return False
    return True


def test_an_apiserver_outage_while_run_pods_run_loses_no_outcome(
    node_cluster: Any,
    pod_tenant: Stacks,
    node_git: GitServer,
    tmp_path: Path,
    state: Path,
    faults: NodeFaults,
) -> None:
    """The API down >= 45 s while two runs end on the node: both concluded after, once."""
    names = ["outage-a", "outage-b"]
    program = Program(node_git, tmp_path)
    for name in names:
        pod_tenant.create(pod_stack(pod_tenant, name, program, delay=DELAY))
    for name in names:
        wait_running(state, name)
    leader = deployment.lease_holder(node_cluster)
    with faults.apiserver_down() as down_at:
        wait_for(
            lambda: time.monotonic() - down_at >= OUTAGE and finished_on_node(state, names),
            f"both updates to end on the node and {OUTAGE:.0f}s of outage",
            OUTAGE + 240,
        )
    try:
        for name in names:
            concluded_once(pod_tenant, name, "one")
            assert (state / f"{name}.txt").read_text() == "one"
    finally:  # the leader lost its Lease (renew deadline 10 s) and exited: who concluded
        print(f"leader {leader}; after the outage {deployment.lease_holder(node_cluster)}")  # noqa: T201


# -- 5: the operator SIGKILLed, a second replica takes the Lease ----------------------------


@pytest.fixture
def two_replicas(node_cluster: Any) -> Iterator[None]:
    """The operator's Deployment at two replicas (one leads); one again afterwards."""
    scale = ("scale", f"deployment/{deployment.NAME}", "-n", NAMESPACE)
    node_cluster.kubectl(*scale, "--replicas=2")
    try:
        deployment.rollout(node_cluster)
        yield
    finally:
        node_cluster.kubectl(*scale, "--replicas=1")
        deployment.rollout(node_cluster)
        wait_for(lambda: len(deployment.pods(node_cluster)) == 1, "one operator pod left", 120)


def leader_pod(node_cluster: Any) -> dict[str, Any]:
    """The operator pod whose process holds the Lease (identity ``<hostname>_<pid>_<hex>``)."""
    holder = deployment.lease_holder(node_cluster)
    found = [
        p
        for p in deployment.ready_pods(node_cluster)
        if holder.startswith(p["metadata"]["name"] + "_")
    ]
    assert len(found) == 1, f"the Lease holder {holder!r} is not one ready operator pod"
    return found[0]


def test_a_killed_operator_is_replaced_by_a_replica_that_attaches_once(
    node_cluster: Any,
    pod_tenant: Stacks,
    node_git: GitServer,
    tmp_path: Path,
    state: Path,
    two_replicas: None,
    faults: NodeFaults,
) -> None:
    """SIGKILL the leader mid-run: the other replica takes the Lease and concludes each run once."""
    del two_replicas, faults
    names = ["orphan-a", "orphan-b"]
    program = Program(node_git, tmp_path)
    for name in names:
        pod_tenant.create(pod_stack(pod_tenant, name, program, delay="40"))
    for name in names:
        wait_running(state, name)
    killed = deployment.lease_holder(node_cluster)
    os.kill(deployment.container_process(leader_pod(node_cluster)), signal.SIGKILL)
    wait_for(
        lambda: deployment.lease_holder(node_cluster) not in ("", killed),
        "another operator instance to take the Lease",
        120,
    )
    for name in names:
        ready = concluded_once(pod_tenant, name, "one")
        assert ready["status"]["lastUpdate"]["state"] == "succeeded"
    # Which instance took over (the other replica, or the killed container restarted
    # with a new identity) is the Lease's race; either way it is a new instance.
    holder = deployment.lease_holder(node_cluster)
    print(f"killed {killed}; the Lease is now {holder}")  # noqa: T201
    assert holder != killed
    leader_pod(node_cluster)  # the holder is one ready operator pod
