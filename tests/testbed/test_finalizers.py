"""``release_finalizers``: a test's namespace goes once its operator is gone."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from kubernetes import client

from testbed.controller_manager import ControllerManager
from testbed.finalizers import release_finalizers
from testbed.waits import wait_for
from tests.testbed.test_controller_manager import GONE_WITHIN, gone

pytestmark = pytest.mark.integration

FINALIZER = "finalizer.stack.pulumi.com"


def stack(name: str, finalizers: list[str]) -> dict[str, object]:
    """A Stack ``name`` with ``finalizers``, as an operator that then stopped left it."""
    return {
        "apiVersion": "pulumi.com/v1",
        "kind": "Stack",
        "metadata": {"name": name, "finalizers": finalizers},
        "spec": {"stack": "dev", "projectRepo": "https://example.com/p.git", "branch": "main"},
    }


def test_a_namespace_whose_stacks_are_released_is_deleted(
    controller_manager: ControllerManager, stack_crd: Path, api_client: client.ApiClient
) -> None:
    """Only the finalizers go (one Stack had some); then the namespace controller ends it."""
    del controller_manager, stack_crd
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    name = f"released-{secrets.token_hex(4)}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    for stack_name, finalizers in (("kept", [FINALIZER]), ("plain", [])):
        body = stack(stack_name, finalizers)
        custom.create_namespaced_custom_object("pulumi.com", "v1", name, "stacks", body)

    assert release_finalizers(api_client, name) == 1
    kept = custom.get_namespaced_custom_object("pulumi.com", "v1", name, "stacks", "kept")
    assert not kept["metadata"].get("finalizers")  # type: ignore[index]
    assert kept["spec"]["stack"] == "dev"  # type: ignore[index]

    core.delete_namespace(name)
    wait_for(lambda: gone(core.read_namespace, name), f"namespace {name} to go", GONE_WITHIN)


def test_a_namespace_without_the_crds_or_stacks_releases_nothing(
    api_client: client.ApiClient, namespace: str
) -> None:
    """Nothing to release is no error."""
    assert release_finalizers(api_client, namespace) == 0
