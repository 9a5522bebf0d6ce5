"""Warm run pods (``--run-pod-keep-warm``): a burst of changes pays one pod start.

Under the pod runner only: the window keeps a run pod, which the agent runner has none
of. The operator gets the flag and the ``pods/exec`` permission the handover needs (the
manifests' Role has none of it: the installation page says to add it with the flag).

A Stack's first run pod reports, stays running (the idle gauge says 1), and takes the
Stack's next run, a config change, through ``agent take``: the same pod (same uid), one
pod created, one run reused, the change applied. Once the window has passed with no run,
the agent ends and the operator deletes the pod (the gauge back at 0). A change to a
Secret the pod reads is not taken by a warm pod started before it: a new pod runs it;
an operator stopping deletes the pod that waits for it.
"""

from __future__ import annotations

import signal
from typing import Any

import pytest
from kubernetes import client

from testbed.rbac import SERVICE_ACCOUNT
from testbed.waits import wait_for
from tests.e2e.beds import Bed
from tests.e2e.conftest import Operator, Program, Stacks
from tests.e2e.test_tenant_boundaries import run_pod

pytestmark = [pytest.mark.e2e, pytest.mark.pulumi, pytest.mark.integration]
GRANTED = ["get", "create"]  # a websocket exec is a get; the API server may also check create
WINDOW = 20  # seconds: long enough for the test's next change, short enough to see it end
pod_only = pytest.mark.parametrize(  # a window keeps a pod: the pod runner's only
    "runner", [pytest.param("pod", marks=[pytest.mark.node, pytest.mark.image])]
)


@pytest.fixture
def operator_flags() -> tuple[str, ...]:
    """The window."""
    return (f"--run-pod-keep-warm={WINDOW}s",)


@pytest.fixture
def exec_granted(bed: Bed) -> None:
    """``pods/exec`` for the operator's ServiceAccount in the test namespace."""
    namespace = bed.namespace
    name = "pulumi-stack-operator-warm-pods"
    with bed.control_plane.api_client() as api:
        grant(client.RbacAuthorizationV1Api(api), namespace, name)


def grant(rbac: client.RbacAuthorizationV1Api, namespace: str, name: str) -> None:
    """A Role ``name`` with ``pods/exec``, bound to the operator's account."""
    rule = client.V1PolicyRule(api_groups=[""], resources=["pods/exec"], verbs=GRANTED)
    rbac.create_namespaced_role(
        namespace, client.V1Role(metadata=client.V1ObjectMeta(name=name), rules=[rule])
    )
    subject = client.RbacV1Subject(kind="ServiceAccount", name=SERVICE_ACCOUNT, namespace=namespace)
    binding = client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name=name),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=name),
        subjects=[subject],
    )
    rbac.create_namespaced_role_binding(namespace, binding)


def meta(pod: client.V1Pod) -> client.V1ObjectMeta:
    """A pod's metadata (the API server always sets it)."""
    assert pod.metadata is not None
    return pod.metadata


def metric(operator: Operator, name: str) -> float:
    """A metric family's one sample (0 when absent)."""
    found = operator.metric(f"{name} ")
    return float(found) if found is not None else 0.0


def idle_pod(stacks: Stacks, name: str, operator: Operator) -> client.V1Pod:
    """The Stack's run pod once it is kept warm: running, concluded, counted idle."""

    def kept() -> client.V1Pod | None:
        pod = run_pod(stacks, name)
        if pod is None or pod.status is None or pod.status.phase != "Running":
            return None
        concluded = "pulumi-stack-operator.dev/concluded" in (meta(pod).annotations or {})
        counted = metric(operator, "pulumi_stack_run_pods_idle") == 1
        return pod if concluded and counted else None

    return wait_for(kept, "the run pod kept warm and counted idle", timeout=60)


def first_run_kept(stacks: Stacks, name: str, program: Program, operator: Operator) -> client.V1Pod:
    """Create Stack ``name``; its run pod once Ready and kept warm."""
    stacks.create(stacks.manifest(name, program))
    stacks.wait_ready(name)
    return idle_pod(stacks, name, operator)


def changed(stacks: Stacks, name: str) -> dict[str, Any]:
    """The Stack once Ready with its ``content`` config changed to "two", and applied."""
    stacks.patch(name, {"spec": {"config": {"content": "two"}}})
    obj = stacks.wait_ready(name)
    assert stacks.target(name).read_text() == "two"
    return obj


@pod_only
def test_a_burst_of_changes_pays_one_pod_start(
    exec_granted: None, operator: Operator, stacks: Stacks, program: Program
) -> None:
    """The next run goes to the warm pod; the pod goes once the window passed."""
    del exec_granted
    first = first_run_kept(stacks, "burst", program, operator)
    assert metric(operator, "pulumi_stack_run_pods_created_total") == 1
    obj = changed(stacks, "burst")
    assert obj["status"]["outputs"]["content"] == "two"
    again = idle_pod(stacks, "burst", operator)
    assert meta(again).uid == meta(first).uid
    assert (meta(again).annotations or {})["pulumi-stack-operator.dev/generation"] == "2"
    assert metric(operator, "pulumi_stack_run_pods_created_total") == 1
    assert metric(operator, "pulumi_stack_run_pods_reused_total") == 1

    wait_for(
        lambda: (
            run_pod(stacks, "burst") is None and metric(operator, "pulumi_stack_run_pods_idle") == 0
        ),
        "the warm pod deleted once its window passed",
        timeout=WINDOW + 60,
    )


@pod_only
def test_a_changed_secret_is_not_taken_by_a_warm_pod(
    exec_granted: None, operator: Operator, stacks: Stacks, program: Program
) -> None:
    """The pod read the passphrase Secret at its start: a new pod runs after it changed."""
    del exec_granted
    first = first_run_kept(stacks, "rotated", program, operator)
    labels = {"metadata": {"labels": {"rotated": "yes"}}}  # a new resourceVersion, same value
    stacks.core.patch_namespaced_secret("pulumi-secrets", stacks.namespace, labels)
    changed(stacks, "rotated")
    second = idle_pod(stacks, "rotated", operator)
    assert meta(second).uid != meta(first).uid
    assert metric(operator, "pulumi_stack_run_pods_created_total") == 2
    assert metric(operator, "pulumi_stack_run_pods_reused_total") == 0
    operator.stop(signal.SIGTERM)  # a stopping operator leaves no pod waiting for it
    wait_for(lambda: run_pod(stacks, "rotated") is None, "the idle pod deleted", timeout=60)
