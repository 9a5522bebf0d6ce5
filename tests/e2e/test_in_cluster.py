"""A program deploying into its own cluster as the Stack's ServiceAccount, with no kubeconfig.

Under the pod runner, the way PKO v2's examples deploy: the pulumi-kubernetes provider
gets no kubeconfig and uses the in-cluster configuration of the run pod, acting as the
Stack's ServiceAccount, which a Role lets manage ConfigMaps of its own namespace only. The
program creates a ConfigMap there (Ready, with what the API server returned); reaching into
another namespace is refused by the API server, and the Stack's Ready message says so.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from reconcile.tenancy import RUNNER_LABEL
from tests.e2e.beds import Bed
from tests.e2e.conftest import Operator, Stacks, find
from tests.e2e.test_programs import FIRST_RUN, config_map, with_mirrors
from tests.e2e.test_sources import apply_program, source_stack

pytestmark = [pytest.mark.e2e, pytest.mark.pulumi, pytest.mark.integration]
ACCOUNT = "deployer"


@pytest.fixture
def bed(bed: Bed, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Bed]:
    """The bed, with a plugin mirror, a package mirror and a cache claim."""
    with with_mirrors(bed, request, tmp_path) as mirrored:
        yield mirrored


def program(namespace: str) -> dict[str, Any]:
    """A ConfigMap in ``namespace`` through the in-cluster provider; what the API returned.

    Not a ``get`` resource: pulumi-language-yaml (1.25 to 1.30) asserts on a ``get`` of any
    Kubernetes kind (their schemas have constant properties) and crashes, which the engine
    reports only as ``error reading from server: EOF`` (the runner now names the panic).
    """
    return {
        "resources": {
            "settings": {
                "type": "kubernetes:core/v1:ConfigMap",
                "properties": {
                    "metadata": {"name": "settings", "namespace": namespace},
                    "data": {"content": "in-cluster"},
                },
                "options": {"version": "4.25.0"},
            },
        },
        "outputs": {"content": "${settings.data.content}", "uid": "${settings.metadata.uid}"},
    }


def grant_config_maps(bed: Bed, namespace: str) -> None:
    """The ServiceAccount ``ACCOUNT`` with a Role on the ConfigMaps of ``namespace``."""
    with bed.control_plane.api_client() as api:
        core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
        account = client.V1ServiceAccount(
            metadata=client.V1ObjectMeta(name=ACCOUNT, labels={RUNNER_LABEL: "true"})
        )
        core.create_namespaced_service_account(namespace, account)
        rule = client.V1PolicyRule(
            api_groups=[""],
            resources=["configmaps"],
            verbs=["get", "list", "create", "patch", "delete", "update"],
        )
        role = client.V1Role(metadata=client.V1ObjectMeta(name=ACCOUNT), rules=[rule])
        rbac.create_namespaced_role(namespace, role)
        binding = client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name=ACCOUNT),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="Role", name=ACCOUNT
            ),
            subjects=[
                client.RbacV1Subject(kind="ServiceAccount", name=ACCOUNT, namespace=namespace)
            ],
        )
        rbac.create_namespaced_role_binding(namespace, binding)


@pytest.mark.parametrize("runner", ["pod"])
@pytest.mark.node
@pytest.mark.image
def test_a_program_deploys_into_its_namespace_with_the_in_cluster_config(
    bed: Bed, stacks: Stacks, operator: Operator
) -> None:
    """No kubeconfig: Ready with the ConfigMap read back; another namespace is a 403."""
    del operator  # runs the Stacks
    grant_config_maps(bed, bed.namespace)
    apply_program(bed, bed.namespace, "in-cluster", program(bed.namespace))
    stacks.hand_over()
    manifest = source_stack(stacks, "app", programRef={"name": "in-cluster"})
    manifest["spec"].pop("secretsRef")
    manifest["spec"]["serviceAccountName"] = ACCOUNT
    stacks.create(manifest)
    status = stacks.wait_ready("app", FIRST_RUN)["status"]
    assert status["outputs"]["content"] == "in-cluster"
    assert status["outputs"]["uid"], "the uid the API server gave the ConfigMap"
    assert config_map(bed, bed.namespace) == {"content": "in-cluster"}

    elsewhere = f"other-{secrets.token_hex(3)}"
    apply_program(bed, bed.namespace, "in-cluster", program(elsewhere))
    failed = stacks.wait_reason("app", "Ready", "UpdateFailed", 300)
    ready = find(failed, "Ready")
    assert ready is not None
    assert "forbidden" in ready["message"], ready["message"]
    assert f'"system:serviceaccount:{bed.namespace}:{ACCOUNT}"' in ready["message"]
