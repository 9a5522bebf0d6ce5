"""A hostile tenant's program, under both runners: what it can reach of another tenant.

Namespace A runs ``testbed/programs/hostile``: it tries to use its token, list every Stack,
read a Secret of namespace B, patch B's Stack and write B's status (dry runs: allowed or
not, nothing changes), find B's passphrase in any process it can see, and B's checkout. Its
Stack's ``attempts`` output says what each try got. B's Stack is compared before and after.

``--runner=pod``: every try fails (403, the tenant's own identity, nothing found), the
operator's /metrics included (401 without a token, 403 with the tenant's).
``--runner=local``: the same program acts as the operator. That is what the README and
docs/runners-and-security.md say of the local runner: one trust domain.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.git_server import GitServer
from testbed.node import deployment
from tests.conftest import PROGRAMS
from tests.e2e.conftest import Program, Stacks
from tests.node.fixtures import tenant_namespace
from tests.node.test_operator import stack_manifest
from tests.node.test_pod_runner import pod_stack

pytestmark = [pytest.mark.node, pytest.mark.image, pytest.mark.e2e]

VICTIM = "victim-web"  # a name no other test's Stack has: the state directory is shared
OPERATOR_IDENTITY = f"system:serviceaccount:{deployment.NAMESPACE}:{deployment.NAME}"


def hostile_program(git: GitServer, tmp_path: Path) -> Program:
    """A repository whose ``app/`` is the hostile program."""
    program = Program(git, tmp_path)
    files = {f"app/{p.name}": p.read_text() for p in (PROGRAMS / "hostile").iterdir()}
    program.checkout.commit(files, "hostile")
    return program


def victim_view(stacks: Stacks, name: str) -> dict[str, Any]:
    """What of B's Stack must not change: spec, generation and status."""
    obj = stacks.get(name)
    return {
        "spec": obj["spec"],
        "generation": obj["metadata"]["generation"],
        "status": obj["status"],
    }


def attack(
    attacker: Stacks, body: dict[str, Any], victim: Stacks, metrics_url: str
) -> dict[str, Any]:
    """Run the hostile Stack against ``victim``'s Stack ``VICTIM``; its attempts."""
    body["spec"]["config"] = {
        **{k: v for k, v in body["spec"]["config"].items() if k != "content"},
        "victimNamespace": victim.namespace,
        "victimStack": VICTIM,
        "victimSecret": "pulumi-secrets",
        "metricsUrl": metrics_url,
    }
    before = victim_view(victim, VICTIM)
    attacker.create(body)
    ready = attacker.wait_ready(body["metadata"]["name"], timeout=300)
    assert victim_view(victim, VICTIM) == before, "the victim's Stack changed"
    attempts: dict[str, Any] = ready["status"]["outputs"]["attempts"]
    return attempts


@pytest.fixture
def pod_victim(node_cluster: Any, pod_tenant: Stacks, tmp_path: Path) -> Iterator[Stacks]:
    """Namespace B for the pod runner, with a state directory of its own."""
    del pod_tenant  # deploys the pod runner first
    state = deployment.state_directory(tmp_path / "victim-state")
    passphrase = f"victim-{secrets.token_hex(8)}"
    with tenant_namespace(node_cluster, "victim", state, passphrase, claim=True) as stacks:
        yield stacks


def test_under_the_pod_runner_a_hostile_program_reaches_nothing(
    node_cluster: Any,
    pod_tenant: Stacks,
    pod_victim: Stacks,
    node_git: GitServer,
    tmp_path: Path,
) -> None:
    """Every try fails and shows as such in A's Stack; B is untouched.

    The operator's /metrics (every tenant's Stacks) answers 401 without a token and 403
    with the tenant's own.
    """
    files = Program(node_git, tmp_path)
    pod_victim.create(pod_stack(pod_victim, VICTIM, files))
    pod_victim.wait_ready(VICTIM, timeout=300)
    body = pod_stack(pod_tenant, "intruder-pod", hostile_program(node_git, tmp_path))
    attempts = attack(pod_tenant, body, pod_victim, deployment.metrics_url(node_cluster))
    assert attempts == {
        "identity": f"system:serviceaccount:{pod_tenant.namespace}:default",
        "listStacks": 403,
        "readSecret": 403,
        "patchStack": 403,
        "writeStatus": 403,
        "foreignPassphrase": False,
        "foreignCheckout": False,
        "readMetrics": 403,
        "readMetricsAnonymously": 401,
    }, json.dumps(attempts)


def test_under_the_local_runner_the_same_program_acts_as_the_operator(
    node_cluster: Any,
    stack_overlay: Path,
    tenant: Stacks,
    node_git: GitServer,
    tmp_path: Path,
    state: Path,
) -> None:
    """The documented difference: the operator's identity and every call it may make."""
    deployment.deploy(node_cluster, stack_overlay)
    passphrase = f"victim-{secrets.token_hex(8)}"
    with tenant_namespace(node_cluster, "victim", state, passphrase) as victim:
        files = Program(node_git, tmp_path)
        victim.create(stack_manifest(victim, VICTIM, files))
        victim.wait_ready(VICTIM, timeout=300)
        body = stack_manifest(tenant, "intruder-local", hostile_program(node_git, tmp_path))
        attempts = attack(tenant, body, victim, deployment.metrics_url(node_cluster))
    assert attempts["identity"] == OPERATOR_IDENTITY
    assert (attempts["listStacks"], attempts["readSecret"]) == (200, 200)
    assert (attempts["patchStack"], attempts["writeStatus"]) == (200, 200)
    assert attempts["foreignCheckout"] is True
