"""``--runner=pod`` on the real node: the Stack's namespace deleted while its run pod runs.

Without ``destroyOnFinalize`` the run is interrupted, the finalizer is removed and the
namespace goes. With it, the destroy cannot run (nothing can be created in a namespace
being deleted, and its Secrets go with it): the Stack says so (DeletionBlocked, naming the
cause and the way out) and keeps its finalizer, so the namespace waits for its owner
rather than abandon the stack's resources; ``destroyOnFinalize: false`` lets it go.
Either way the operator's other Stacks go on, and once the namespace is gone the operator
logs nothing more about it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import secrets
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from controller.clock import parse_time
from testbed.git_server import GitServer
from testbed.node import deployment
from testbed.node.tenancy import wait_for_service_account
from testbed.waits import wait_for
from tests.e2e.conftest import Program, Sentinels, Stacks, find, has_reason
from tests.e2e.waits import wait_mid_step
from tests.node.faults import fault_stack
from tests.node.fixtures import CLAIM
from tests.status.invariants import StackWatcher

pytestmark = [pytest.mark.node, pytest.mark.image, pytest.mark.e2e]

# Seconds the run's create takes: it must outlast the namespace controller's deletion of
# the run pod, which follows the namespace's within seconds; the interrupted CLI then waits
# for the rest of it (the Python program's provider does not stop on Cancel) before the
# pod, and so the namespace, can go.
DELAY = "30"


@contextlib.contextmanager
def doomed_namespace(node_cluster: Any, state: Path, passphrase: str) -> Iterator[Stacks]:
    """A namespace with the state claim and the passphrase, that the test deletes itself.

    Its Stacks are watched for the status invariants until it is gone.
    """
    namespace = f"doomed-{secrets.token_hex(4)}"
    volume = f"state-{namespace}"
    node_cluster.kubectl("create", "namespace", namespace)
    manifest = state.parent / f"{namespace}.yaml"
    objects = deployment.state_volume(state, namespace, CLAIM, volume)
    manifest.write_text(yaml.safe_dump_all(objects))
    node_cluster.kubectl("apply", "-f", str(manifest))
    try:
        with node_cluster.api_client() as api, StackWatcher(api, namespace) as watcher:
            wait_for_service_account(client.CoreV1Api(api), namespace)  # or pods are refused
            stacks = Stacks(api, namespace, state / "backend")
            stacks.watcher = watcher
            stacks.secret("pulumi-secrets", {"passphrase": passphrase})
            yield stacks
            watcher.assert_clean()
    finally:
        node_cluster.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=false")
        node_cluster.kubectl("delete", "pv", volume, "--ignore-not-found", "--wait=false")


def namespace(node_cluster: Any, name: str) -> dict[str, Any] | None:
    """The namespace as the API serves it, or None once it is gone."""
    proc = node_cluster.kubectl("get", "namespace", name, "-o", "json", check=False)
    if proc.returncode != 0:
        assert "NotFound" in proc.stderr, proc.stderr
        return None
    found: dict[str, Any] = json.loads(proc.stdout)
    return found


def gone(node_cluster: Any, name: str, timeout: float = 180) -> None:
    """Wait until the namespace ``name`` no longer exists."""
    wait_for(
        lambda: namespace(node_cluster, name) is None,
        f"namespace {name} to be gone",
        timeout,
        detail=lambda: json.dumps((namespace(node_cluster, name) or {}).get("status")),
    )


def delete_mid_run(node_cluster: Any, doomed: Stacks, state: Path, body: dict[str, Any]) -> None:
    """Create the Stack ``body``, and delete its namespace once its update is mid-step."""
    name = body["metadata"]["name"]
    doomed.create(body)
    wait_mid_step(state / "backend", name, "creating file", timeout=240)
    assert doomed.core.read_namespaced_pod(f"{name}-pulumi", doomed.namespace)
    node_cluster.kubectl("delete", "namespace", doomed.namespace, "--wait=false")


def retried_with_backoff(doomed: Stacks, name: str, attempts: int = 5) -> None:
    """The blocked destroy is tried again after 1, 2, 4, 8 s (``--update-retry-base=1``).

    Not on every watch event of its own writes (status contract rule 30): each attempt's
    ``lastUpdate`` is written at least its backoff after the one before, and the versions
    between are that attempt's own writes (Destroying, then DeletionBlocked).
    """

    def failed() -> int:
        return int(
            (doomed.get(name).get("status", {}).get("lastUpdate") or {}).get("failures") or 0
        )

    wait_for(lambda: failed() >= attempts, f"{attempts} destroys of {name} to fail", 120)
    assert doomed.watcher is not None
    seen = [o for o in doomed.watcher.observations(name) if o.obj.get("status")]
    ended: dict[int, str] = {}
    for observation in seen:
        last = observation.obj["status"].get("lastUpdate") or {}
        if last.get("type") == "destroy" and last.get("failures"):
            ended.setdefault(int(last["failures"]), str(last["lastResyncTime"]))
    times = [parse_time(ended[n]) for n in range(1, attempts + 1)]
    for n, (earlier, later) in enumerate(itertools.pairwise(times), start=1):
        assert earlier is not None
        assert later is not None
        waited = (later - earlier).total_seconds()
        assert waited >= 2 ** (n - 1) - 1, f"attempt {n + 1} came {waited}s after attempt {n}"
    first = next(o.seen_at for o in seen if has_reason(o.obj, "Ready", "DeletionBlocked"))
    since = [o for o in seen if o.seen_at >= first]
    span = max(since[-1].seen_at - first, 1.0)
    print(f"{name}: {len(since)} versions in {span:.1f}s after DeletionBlocked")  # noqa: T201
    assert len(since) <= 3 * attempts, [o.obj["status"].get("conditions") for o in since]


def quiet_about(node_cluster: Any, bystander: Stacks, name: str, namespace_name: str) -> None:
    """The other Stack converges on a change; the logs meanwhile say nothing of the namespace.

    The gone namespace's name in no new line: no error loop about it.
    """
    bystander.wait_ready(name, timeout=240)
    before = deployment.logs(node_cluster)
    bystander.patch(name, {"spec": {"config": {"content": "two"}}})
    bystander.wait_ready(name, timeout=240)
    after = deployment.logs(node_cluster)
    # The lines that were not there before, wherever they are: the logs are several
    # containers' (current and previous) one after another, each growing at its end.
    new = list((Counter(after.splitlines()) - Counter(before.splitlines())).elements())
    new = [line for line in new if line]
    assert new, "the bystander's update logged nothing"
    about = [line for line in new if namespace_name in line]
    assert about == [], about


def test_a_namespace_deleted_mid_run_without_destroy_on_finalize_goes(
    node_cluster: Any,
    pod_tenant: Stacks,
    node_git: GitServer,
    tmp_path: Path,
    state: Path,
    sentinels: Sentinels,
) -> None:
    """The run is interrupted, the finalizer removed, the namespace gone; others go on."""
    program = Program(node_git, tmp_path)
    pod_tenant.create(fault_stack(pod_tenant, "bystander", program))
    with doomed_namespace(node_cluster, state, sentinels.passphrase) as doomed:
        body = fault_stack(doomed, "abandoned", program, delay=DELAY)
        delete_mid_run(node_cluster, doomed, state, body)
        gone(node_cluster, doomed.namespace)
    quiet_about(node_cluster, pod_tenant, "bystander", doomed.namespace)
    assert (state / "bystander.txt").read_text() == "two"


def test_a_namespace_deleted_mid_run_with_destroy_on_finalize_waits_for_its_owner(
    node_cluster: Any,
    pod_tenant: Stacks,
    node_git: GitServer,
    tmp_path: Path,
    state: Path,
    sentinels: Sentinels,
) -> None:
    """DeletionBlocked saying why and the way out; the finalizer stays until it is taken.

    ``destroyOnFinalize: false`` lets the namespace go. Others go on meanwhile.
    """
    program = Program(node_git, tmp_path)
    pod_tenant.create(fault_stack(pod_tenant, "onlooker", program))
    with doomed_namespace(node_cluster, state, sentinels.passphrase) as doomed:
        body = fault_stack(doomed, "kept", program, delay=DELAY)
        body["spec"]["destroyOnFinalize"] = True
        delete_mid_run(node_cluster, doomed, state, body)
        blocked = doomed.wait_seen("kept", "Ready", "DeletionBlocked", timeout=240)
        message = (find(blocked, "Ready") or {}).get("message", "")
        # Why: the run pod refused in a namespace being deleted, or (the namespace
        # controller deleting Secrets first) the passphrase's Secret gone with it.
        causes = ("the namespace is being deleted", f'not found in namespace "{doomed.namespace}"')
        assert any(cause in message for cause in causes), message
        assert "destroyOnFinalize to false or remove the finalizer" in message, message
        # No Event: the API server refuses new objects, Events too, in a namespace being
        # deleted; the status is where the Stack says it.
        assert "finalizer.stack.pulumi.com" in doomed.get("kept")["metadata"]["finalizers"]
        retried_with_backoff(doomed, "kept")
        pod_tenant.wait_ready("onlooker", timeout=240)  # unaffected meanwhile
        doomed.patch("kept", {"spec": {"destroyOnFinalize": False}})
        gone(node_cluster, doomed.namespace)
    quiet_about(node_cluster, pod_tenant, "onlooker", doomed.namespace)
