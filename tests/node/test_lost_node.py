"""A run on a lost node is fenced: the next run of its Stack never overlaps it (two nodes).

The issue it reproduces: the kubelet of the node running a Stack's run pod stops (its
containers go on); the run is ``RunnerFailed`` ``NodeNotReady``; the lost pod is
force-deleted, the way out the docs give; the next run starts on the other node. That
next run must not run its program while the lost one still runs, nor release the lost
run's lock before the lost run is over.

The cluster is the two-node one of ``test_two_nodes`` (its own, for this module), with the
operator deployed as users deploy it (``--runner=pod``) and a file backend on a hostPath
claim that both nodes mount. The program is the files program with a prologue that marks
each run of it: a line in ``<marks>.jsonl`` (its start, and whether another run of it held
the ``flock`` on ``<marks>.running``, which every run holds while it lives; both nodes
share this machine's kernel, so the lock is exact). A watcher thread of this test sees,
from this machine, when the lost pod's run processes are gone (by its pod's cgroup) and
when the lost run's lock file is.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from testbed.git_server import GitServer
from testbed.image import BuiltImage, save_archive
from testbed.node import NodeCluster, deployment
from testbed.node.deployment import NAMESPACE, SELECTOR
from testbed.node.faults import NodeFaults
from testbed.waits import wait_for
from tests.conftest import PROGRAMS
from tests.e2e.conftest import Program, Sentinels, Stacks, find
from tests.node.fixtures import STACK_ARGS, tenant_namespace
from tests.node.test_node_faults import NODE_BOUND, seen_with_reason, wait_running
from tests.node.test_pod_runner import pod_stack, run_pod
from tests.node.test_two_nodes import two_nodes

pytestmark = [
    pytest.mark.node,
    pytest.mark.image,
    pytest.mark.e2e,
    pytest.mark.integration,
    pytest.mark.git,
]

__all__ = ["two_nodes"]  # the module's own two-node cluster (a fixture)

NAME = "fenced"
WATCH_EVERY = 0.2  # seconds between the watcher's looks (it records, it never decides)
# The next run's bound once the lost pod is force-deleted: the lost run notices (its token
# refused, 30 s at most), is interrupted, killed after the CLI's 60 s grace, releases its
# lock; then the next run (or its retry after an UpdateConflict) runs the program.
AFTER_FORCE_DELETE = 300

MARKS_PROLOGUE = """
import fcntl as _fcntl
import json as _json
import os as _os
import time as _time

import pulumi as _pulumi

_marks = _pulumi.Config().get("marks")
if _marks:
    _held = open(_marks + ".running", "a")  # locked for as long as this program lives
    try:
        _fcntl.flock(_held, _fcntl.LOCK_EX | _fcntl.LOCK_NB)
        _overlap = False
    except BlockingIOError:
        _overlap = True
    with open(_marks + ".jsonl", "a") as _out:
        _line = {"start": _time.time(), "overlap": _overlap, "pid": _os.getpid()}
        _out.write(_json.dumps(_line) + "\\n")
"""


@dataclasses.dataclass(frozen=True)
class LostBed:
    """The two-node cluster with the operator deployed and what its Stacks need."""

    cluster: NodeCluster
    git: GitServer
    state: Path


@pytest.fixture(scope="module")
def lost_bed(
    two_nodes: NodeCluster, operator_image: BuiltImage, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LostBed]:
    """The operator (``--runner=pod``) on the two-node cluster, a git server, a state dir."""
    two_nodes.load_image(save_archive(operator_image), operator_image.ref)
    root = tmp_path_factory.mktemp("lost-node")
    overlay = deployment.write_overlay(
        root / "overlay", str(operator_image.ref), args=(*STACK_ARGS, "--runner=pod")
    )
    deployment.deploy(two_nodes, overlay)
    git = GitServer(root / "git", host=two_nodes.host_ip)
    git.start()
    try:
        yield LostBed(two_nodes, git, deployment.state_directory(root / "state"))
    finally:
        git.stop()
        (root / "operator.log").write_text(deployment.logs(two_nodes))


@pytest.fixture
def stacks(lost_bed: LostBed) -> Iterator[Stacks]:
    """A fresh namespace with a claim on the state directory; its Stacks watched."""
    passphrase = Sentinels().passphrase
    with tenant_namespace(lost_bed.cluster, "lost", lost_bed.state, passphrase, claim=True) as s:
        yield s


def marked_program(bed: LostBed, work: Path) -> Program:
    """The files program, each run of it marked (``MARKS_PROLOGUE``)."""
    program = Program(bed.git, work)
    main = (PROGRAMS / "files" / "__main__.py").read_text()
    program.commit("mark each run", **{"app/__main__.py": MARKS_PROLOGUE + main})
    return program


def away_from_the_operator() -> dict[str, Any]:
    """A run pod's affinity: rather not on the operator's node (so that its node can be lost)."""
    term = {
        "labelSelector": {"matchLabels": dict(p.split("=") for p in SELECTOR.split(","))},
        "namespaces": [NAMESPACE],
        "topologyKey": "kubernetes.io/hostname",
    }
    weighted = [{"weight": 100, "podAffinityTerm": term}]
    return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": weighted}}


# -- what this machine sees of the lost run ---------------------------------------------------


def run_processes(pod_uid: str) -> list[int]:
    """The pod's run processes on this machine: its CLI, plugins and program (not the agent).

    Found by the pod's uid in their cgroup; the agent (``pulumi-stack-operator``, under
    tini) and the sandbox's ``pause`` are left out.
    """
    variants = (pod_uid, pod_uid.replace("-", "_"))
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cgroup = (entry / "cgroup").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if not any(v in cgroup for v in variants) or not cmdline:
            continue
        program = cmdline.split(b"\0")[0].rsplit(b"/", 1)[-1]
        if b"pulumi-stack-operator" in cmdline or program == b"pause":
            continue
        found.append(int(entry.name))
    return found


class Watch:
    """Records, from this machine, when the lost run's processes and lock file went."""

    def __init__(self, pod_uid: str, lock: Path) -> None:
        """Watch the run processes of pod ``pod_uid`` and the lock file ``lock``."""
        self.pod_uid, self.lock = pod_uid, lock
        self.run_over_at: float | None = None  # time.time() when its run processes were gone
        self.lock_gone_at: float | None = None
        self.live_at_lock_gone: list[int] = []  # run processes left when the lock went
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lost-run-watch", daemon=True)

    @contextlib.contextmanager
    def watching(self) -> Iterator[Watch]:
        """Record until the block ends."""
        assert run_processes(self.pod_uid), "the run has processes to watch"
        self._thread.start()
        try:
            yield self
        finally:
            self._done.set()
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._done.wait(WATCH_EVERY):
            now, live = time.time(), run_processes(self.pod_uid)
            if self.run_over_at is None and not live:
                self.run_over_at = now
            if self.lock_gone_at is None and not self.lock.exists():
                self.lock_gone_at, self.live_at_lock_gone = now, live


def marks(state: Path) -> list[dict[str, Any]]:
    """Every run of the program, in the order they started."""
    path = state / f"{NAME}.marks.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def lock_of_the_run(state: Path) -> Path:
    """The one lock file of the Stack's stack while its run holds it."""
    directory = state / "backend" / ".pulumi" / "locks" / "organization" / "files" / NAME
    (lock,) = list(directory.glob("*.json"))
    return lock


def since(when: float | None, start: float) -> str:
    """``when`` as seconds after ``start`` ("never" for None)."""
    return "never" if when is None else f"in {when - start:.1f}s"


def force_delete(stacks: Stacks, uid: str) -> None:
    """Force-delete the Stack's run pod of ``uid`` (``kubectl delete --force --grace-period=0``)."""
    options = client.V1DeleteOptions(
        grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid)
    )
    stacks.core.delete_namespaced_pod(f"{NAME}-pulumi", stacks.namespace, body=options)


def node_of(pod: dict[str, Any]) -> str:
    """The node a pod runs on."""
    return str(pod["spec"]["nodeName"])


def operator_node(cluster: NodeCluster) -> str:
    """The node the operator's pod runs on."""
    (pod,) = deployment.ready_pods(cluster)
    return node_of(pod)


def test_a_run_on_a_lost_node_is_over_before_the_next_run_of_its_stack_runs(
    lost_bed: LostBed, stacks: Stacks, tmp_path: Path
) -> None:
    """Kubelet stopped, NodeNotReady, pod force-deleted: the runs never overlap.

    The lost run stops itself (its pod is gone), and only then is its lock released and
    the next run's program started, on the other node, while the lost node is still down.
    """
    cluster, state = lost_bed.cluster, lost_bed.state
    body = pod_stack(stacks, NAME, marked_program(lost_bed, tmp_path), delay="300")
    body["spec"]["config"]["marks"] = f"/state/{NAME}.marks"
    body["spec"]["workspaceTemplate"]["spec"]["podTemplate"]["spec"]["affinity"] = (
        away_from_the_operator()
    )
    stacks.create(body)
    wait_running(state, NAME)
    first = run_pod(stacks, NAME) or {}
    lost = node_of(first)
    assert lost != operator_node(cluster), "the run pod should be away from the operator"
    faults = NodeFaults(cluster, node=cluster.node_names.index(lost) + 1)
    watch = Watch(first["metadata"]["uid"], lock_of_the_run(state))
    with watch.watching(), faults.stopped("kubelet"):
        stacks.patch(NAME, {"spec": {"config": {"delay": "0", "content": "again"}}})
        failed = wait_for(
            lambda: seen_with_reason(stacks, NAME, "RunnerFailed"),
            f"RunnerFailed within {NODE_BOUND}s of the kubelet's stop",
            NODE_BOUND,
        )
        assert "NodeNotReady" in find(failed, "Ready")["message"]  # type: ignore[index]
        wait_for(
            lambda: (run_pod(stacks, NAME) or {}).get("metadata", {}).get("deletionTimestamp"),
            "the operator to delete the lost run pod",
            60,
        )
        force_delete(stacks, first["metadata"]["uid"])
        forced = time.time()
        ready = stacks.wait_ready(NAME, timeout=AFTER_FORCE_DELETE)
        assert faults.node_ready() is False, "the lost node is still down"
    runs = marks(state)
    print(  # noqa: T201 - the numbers of the report
        "after the force-delete: the lost run's processes gone "
        f"{since(watch.run_over_at, forced)}, its lock {since(watch.lock_gone_at, forced)}, "
        "the next run started "
        f"{since(runs[-1]['start'], forced)}; runs: {runs}"
    )
    assert ready["status"]["outputs"]["content"] == "again"
    assert (state / f"{NAME}.txt").read_text() == "again"
    assert len(runs) == 2, runs
    assert not runs[1]["overlap"], "the next run's program ran while the lost one's lived"
    assert watch.run_over_at is not None, "the lost run never ended"
    assert runs[1]["start"] > watch.run_over_at, "the next run started before the lost ended"
    assert watch.lock_gone_at is not None
    assert watch.live_at_lock_gone == [], "the lost run's lock went while it still ran"
