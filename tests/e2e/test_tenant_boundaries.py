"""What a Stack author may ask of a run pod: only what their own namespace already grants.

The operator runs with ``--runner=pod`` as its own ServiceAccount (the manifests' RBAC).

On the control plane alone (no run pod needs to start): a Stack asking for a priority
class the operator does not list, a policy annotation or label (AppArmor, seccomp, a
service mesh's), a wildcard or control-plane toleration, or a ServiceAccount no admin opted
in stalls with ``InvalidSpec`` naming the field and the fix, and no run pod is created;
an admin's label on the ServiceAccount mends the last without a change to the Stack; an
allowed priority class reaches the run pod, and a deadline past ``--max-run-timeout`` is
cut, and the status says so.

On the node: the run pod's processes hold what each security profile promises, as the
kernel reports it from inside the pod.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from testbed.node.deployment import UID
from testbed.waits import wait_for
from tests.conftest import PROGRAMS
from tests.e2e.beds import Bed
from tests.e2e.conftest import Operator, Program, Stacks, find

pytestmark = [pytest.mark.e2e, pytest.mark.pulumi, pytest.mark.integration]

MAX_RUN_TIMEOUT = 900
FOREVER = 999_999_999
RUNNER_LABEL = "pulumi-stack-operator.dev/stack-runner"
PODS = "spec.workspaceTemplate.spec.podTemplate"


@pytest.fixture
def allowed_class(bed: Bed) -> Iterator[str]:
    """A PriorityClass of this test, the one ``--allowed-priority-classes`` lists."""
    name = f"pulumi-runs-{secrets.token_hex(4)}"
    with bed.control_plane.api_client() as api:
        scheduling = client.SchedulingV1Api(api)
        body = client.V1PriorityClass(metadata=client.V1ObjectMeta(name=name), value=10)
        scheduling.create_priority_class(body)
        try:
            yield name
        finally:
            scheduling.delete_priority_class(name)


@pytest.fixture
def operator_flags(bed: Bed, allowed_class: str) -> tuple[str, ...]:
    """The pod runner (on the control plane alone: an image no pod ever pulls here)."""
    runner = () if bed.runner == "pod" else ("--runner=pod", "--run-image=registry.invalid/x:1")
    return (
        *runner,
        f"--allowed-priority-classes={allowed_class}",
        f"--max-run-timeout={MAX_RUN_TIMEOUT}",
    )


def stack(stacks: Stacks, name: str, program: Program, **spec: Any) -> dict[str, Any]:
    """A Stack of ``program`` whose run pod may be created on the control plane alone.

    Its backend is outside the pod (never reached: no run pod starts without a node): a
    ``file://`` backend on no volume of the pod is refused first (``InvalidSpec``).
    """
    return stacks.manifest(name, program, backend="s3://never-reached", **spec)


def run_pod(stacks: Stacks, name: str) -> client.V1Pod | None:
    """The Stack's run pod, or None."""
    try:
        return stacks.core.read_namespaced_pod(f"{name}-pulumi", stacks.namespace)
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise


def pod_template(**spec: Any) -> dict[str, Any]:
    """A ``workspaceTemplate`` whose podTemplate sets ``spec`` (and metadata, if given)."""
    metadata = spec.pop("metadata", None)
    template: dict[str, Any] = {"spec": spec} if spec else {}
    if metadata:
        template["metadata"] = metadata
    return {"spec": {"podTemplate": template}}


REFUSALS: dict[str, tuple[dict[str, Any], str]] = {
    "critical-priority": (
        {"workspaceTemplate": pod_template(priorityClassName="system-node-critical")},
        f"{PODS}.spec.priorityClassName: PriorityClass 'system-node-critical'",
    ),
    "apparmor-off": (
        {
            "workspaceTemplate": {
                "metadata": {
                    "annotations": {"container.apparmor.security.beta.kubernetes.io/pulumi": "x"}
                }
            }
        },
        (
            "spec.workspaceTemplate.metadata.annotations"
            "[container.apparmor.security.beta.kubernetes.io/pulumi]: refused"
        ),
    ),
    "seccomp-off": (
        {
            "workspaceTemplate": pod_template(
                metadata={"annotations": {"seccomp.security.alpha.kubernetes.io/pod": "x"}}
            )
        },
        f"{PODS}.metadata.annotations[seccomp.security.alpha.kubernetes.io/pod]: refused",
    ),
    "mesh-bypass": (
        {"workspaceTemplate": {"metadata": {"labels": {"sidecar.istio.io/inject": "false"}}}},
        "spec.workspaceTemplate.metadata.labels[sidecar.istio.io/inject]: refused",
    ),
    "any-taint": (
        {"workspaceTemplate": pod_template(tolerations=[{"operator": "Exists"}])},
        f"{PODS}.spec.tolerations[0]: tolerates every taint",
    ),
    "control-plane": (
        {
            "workspaceTemplate": pod_template(
                tolerations=[{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]
            )
        },
        f"{PODS}.spec.tolerations[0]: tolerates the control plane's taint",
    ),
    "borrowed-account": (
        {"serviceAccountName": "secret-reader"},
        (
            'spec.serviceAccountName: ServiceAccount "secret-reader" is not one Stacks may run '
            f"as: a namespace admin opts it in with the label {RUNNER_LABEL}=true"
        ),
    ),
    "missing-account": (
        {"serviceAccountName": "nobody"},
        'spec.serviceAccountName: ServiceAccount "nobody" not found',
    ),
}


def test_what_reaches_past_the_tenant_stalls_before_any_run_pod(
    operator: Operator, stacks: Stacks, program: Program
) -> None:
    """Each refusal: Stalled InvalidSpec naming the field and fix, a Warning, no run pod.

    Then the admin's label on the borrowed ServiceAccount lets its Stack run, as it.
    """
    del operator
    account = client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="secret-reader"))
    stacks.core.create_namespaced_service_account(stacks.namespace, account)
    for name, (spec, _) in REFUSALS.items():
        stacks.create(stack(stacks, name, program, **json.loads(json.dumps(spec))))
    for name, (_, message) in REFUSALS.items():
        stalled = stacks.wait_reason(name, "Stalled", "InvalidSpec", timeout=60)
        assert message in find(stalled, "Stalled")["message"], name  # type: ignore[index]
        assert "currentUpdate" not in stalled["status"], name
        assert run_pod(stacks, name) is None, name
        stacks.wait_events(name, "InvalidSpec")

    labelled = {"metadata": {"labels": {RUNNER_LABEL: "true"}}}
    stacks.core.patch_namespaced_service_account("secret-reader", stacks.namespace, labelled)
    pod = wait_for(lambda: run_pod(stacks, "borrowed-account"), "the opted-in run pod", 60)
    assert pod.spec is not None
    assert pod.spec.service_account_name == "secret-reader"


def test_an_allowed_priority_class_and_a_cut_deadline_reach_the_run_pod(
    operator: Operator, stacks: Stacks, program: Program, allowed_class: str
) -> None:
    """The listed class is the run pod's; ``timeoutSeconds`` past the ceiling is cut to it.

    The run pod's deadline is the operator's ceiling (plus the interrupt grace), and the
    status says the ceiling applies.
    """
    del operator
    body = stack(
        stacks,
        "bounded",
        program,
        timeoutSeconds=FOREVER,
        workspaceTemplate=pod_template(priorityClassName=allowed_class),
    )
    stacks.create(body)
    pod = wait_for(lambda: run_pod(stacks, "bounded"), "the run pod", 60)
    assert pod.spec is not None
    assert pod.spec.priority_class_name == allowed_class
    assert pod.spec.priority == 10
    assert pod.spec.active_deadline_seconds is not None
    assert MAX_RUN_TIMEOUT < pod.spec.active_deadline_seconds < MAX_RUN_TIMEOUT + 300
    note = (
        f"deadline {MAX_RUN_TIMEOUT}s, the operator's --max-run-timeout "
        f"(spec.timeoutSeconds asks {FOREVER}s)"
    )
    started = stacks.wait_events("bounded", "UpdateStarted")
    assert note in started[-1].message
    assert stacks.watcher is not None
    messages = [
        (find(version, "Reconciling") or {}).get("message", "")
        for version in stacks.watcher.versions("bounded")
    ]
    assert any(note in message for message in messages), messages


# -- on the node -------------------------------------------------------------------------


def sandbox_program(bed: Bed, tmp_path: Path) -> Program:
    """A repository whose ``app/`` is the sandbox program (it reports its own sandbox)."""
    program = Program(bed.git, tmp_path / "checkouts")
    files = {f"app/{p.name}": p.read_text() for p in (PROGRAMS / "sandbox").iterdir()}
    program.checkout.commit(files, "sandbox")
    return program


@pytest.mark.parametrize(
    "runner", [pytest.param("pod", marks=[pytest.mark.node, pytest.mark.image])]
)
def test_both_security_profiles_hold_inside_the_run_pod(
    operator: Operator, stacks: Stacks, bed: Bed, tmp_path: Path
) -> None:
    """Each profile's promise, as the kernel reports it to the program itself.

    In both no capability can ever be gained (the bounding set is empty), no new
    privileges, seccomp filtering; restricted adds the read-only root. Both run as the
    image's user (baseline only stops requiring a non-root one).
    """
    del operator
    program = sandbox_program(bed, tmp_path)
    for profile in ("restricted", "baseline"):
        body = stacks.manifest(profile, program)
        body["spec"]["workspaceTemplate"]["spec"]["securityProfile"] = profile
        stacks.create(body)
    sandboxes = {
        profile: stacks.wait_ready(profile, timeout=300)["status"]["outputs"]
        for profile in ("restricted", "baseline")
    }
    for profile, sandbox in sandboxes.items():
        assert int(sandbox["capBnd"], 16) == 0, (profile, sandbox)
        assert int(sandbox["capEff"], 16) == 0, (profile, sandbox)
        assert (sandbox["noNewPrivs"], sandbox["seccomp"]) == ("1", "2"), (profile, sandbox)
        assert sandbox["uid"] == UID, (profile, sandbox)
    assert sandboxes["restricted"]["rootReadOnly"] is True
    assert sandboxes["baseline"]["rootReadOnly"] is False
