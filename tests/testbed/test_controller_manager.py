"""kube-controller-manager beside the control plane: namespaces finish deleting, owners collect."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path

import pytest
from kubernetes import client

from testbed.control_plane import ControlPlane
from testbed.controller_manager import ControllerManager
from testbed.waits import wait_for
from tests.conftest import controller_manager_binary_or_skip

pytestmark = pytest.mark.integration

GONE_WITHIN = 60.0  # seconds; about 10 on an idle 2-core machine


def gone(read: Callable[..., object], *args: str) -> bool:
    """Whether calling ``read(*args)`` answers 404."""
    try:
        read(*args)
    except client.ApiException as err:
        if err.status == 404:
            return True
        raise
    return False


def config_map(name: str, owner: client.V1ConfigMap | None = None) -> client.V1ConfigMap:
    """A ConfigMap ``name``, owned by ``owner`` (blocking its deletion) when given."""
    references = None
    if owner is not None:
        assert owner.metadata is not None
        assert owner.metadata.name is not None
        assert owner.metadata.uid is not None
        reference = client.V1OwnerReference(
            api_version="v1",
            kind="ConfigMap",
            name=owner.metadata.name,
            uid=owner.metadata.uid,
            block_owner_deletion=True,
        )
        references = [reference]
    metadata = client.V1ObjectMeta(name=name, owner_references=references)
    return client.V1ConfigMap(metadata=metadata, data={"k": "v"})


def test_deleted_namespace_is_gone(
    controller_manager: ControllerManager, api_client: client.ApiClient
) -> None:
    """A deleted namespace with an object in it is removed, not left Terminating."""
    del controller_manager
    core = client.CoreV1Api(api_client)
    name = f"kcm-{secrets.token_hex(4)}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    core.create_namespaced_config_map(name, config_map("inside"))

    core.delete_namespace(name)

    wait_for(lambda: gone(core.read_namespace, name), f"namespace {name} to go", GONE_WITHIN)


def test_foreground_delete_removes_dependents_then_owner(
    controller_manager: ControllerManager, api_client: client.ApiClient, namespace: str
) -> None:
    """An owner deleted with foreground propagation: its dependent goes, then it does."""
    del controller_manager
    core = client.CoreV1Api(api_client)
    owner = core.create_namespaced_config_map(namespace, config_map("owner"))
    core.create_namespaced_config_map(namespace, config_map("dependent", owner))

    core.delete_namespaced_config_map(
        "owner", namespace, body=client.V1DeleteOptions(propagation_policy="Foreground")
    )

    read = core.read_namespaced_config_map
    wait_for(lambda: gone(read, "dependent", namespace), "the dependent to go", GONE_WITHIN)
    wait_for(lambda: gone(read, "owner", namespace), "the owner to go", GONE_WITHIN)


def test_stop_leaves_nothing_behind(control_plane: ControlPlane, tmp_path: Path) -> None:
    """After ``stop()`` no process and no default directory of it remains."""
    manager = ControllerManager(controller_manager_binary_or_skip(), control_plane, tmp_path)
    manager.start()
    pid = manager.process.pid if manager.process else None

    manager.stop()

    assert pid is not None
    assert manager.leftovers() == []
    assert "--- starting:" in manager.log_path.read_text()
