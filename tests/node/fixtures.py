"""Fixtures of the operator-on-the-node tests (imported by ``tests/node/conftest.py``).

Session-scoped where setting up is slow: the image is imported into the node once, one
git server and one state directory serve every test, one overlay is applied (and only
rolled out again when a test changed the Deployment).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from testbed.node import deployment
from testbed.node.tenancy import wait_for_service_account
from tests.e2e.conftest import Sentinels, Stacks
from tests.status.invariants import StackWatcher

# Short periods so that scenarios finish in seconds (appended: a later flag wins). The
# shutdown timeout is short so that a rollout interrupts a slow update instead of
# draining it.
# A short Lease: a leader killed without releasing it is replaced in 15 s, not 60.
STACK_ARGS = (
    "--resync-period=2",
    "--update-retry-base=1",
    "--shutdown-timeout=5",
    "--lease-duration=15",
    "--renew-deadline=10",
    "--retry-period=2",
)
LOCAL_ARGS = (*STACK_ARGS, "--runner=local")  # the local runner's scenarios
CLAIM = "state"  # the claim on the state directory in a pod runner's tenant namespace


@pytest.fixture(scope="session")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The host directory mounted at ``/state`` in the operator's pods (owned by its uid)."""
    return deployment.state_directory(tmp_path_factory.mktemp("node-state"))


@pytest.fixture(scope="session")
def stack_overlay(
    node_cluster: Any, tmp_path_factory: pytest.TempPathFactory, image_ref: str, state: Path
) -> Path:
    """The overlay the local runner's Stack scenarios run under (state volume, short periods).

    Tests apply it again first thing (a no-op unless an earlier test changed the
    Deployment), so that each starts from it whatever ran before.
    """
    directory = tmp_path_factory.mktemp("overlay-stacks")
    overlay = deployment.write_overlay(directory, image_ref, args=LOCAL_ARGS, state=state)
    deployment.deploy(node_cluster, overlay)
    return overlay


@contextlib.contextmanager
def tenant_namespace(
    node_cluster: Any, prefix: str, state: Path, passphrase: str, *, claim: bool = False
) -> Iterator[Stacks]:
    """A fresh namespace with the passphrase Secret, its Stacks watched for the invariants.

    With ``claim``, the namespace also gets a PersistentVolumeClaim ``CLAIM`` bound to a
    hostPath volume of ``state`` (run pods mount it through ``workspaceTemplate``).
    """
    namespace = f"{prefix}-{secrets.token_hex(4)}"
    node_cluster.kubectl("create", "namespace", namespace)
    volume_name = f"state-{namespace}"
    if claim:
        node_cluster.kubectl("apply", "-f", str(_claim_manifest(state, namespace, volume_name)))
    with node_cluster.api_client() as api, StackWatcher(api, namespace) as watcher:
        wait_for_service_account(client.CoreV1Api(api), namespace)  # or its pods are refused
        stacks = Stacks(api, namespace, state / "backend")
        stacks.watcher = watcher
        stacks.secret("pulumi-secrets", {"passphrase": passphrase})
        yield stacks
        watcher.assert_clean()
    node_cluster.kubectl("delete", "namespace", namespace, "--wait=false")
    if claim:
        node_cluster.kubectl("delete", "pv", volume_name, "--wait=false")


def _claim_manifest(state: Path, namespace: str, volume_name: str) -> Path:
    manifest = state.parent / f"{namespace}.yaml"
    objects = deployment.state_volume(state, namespace, CLAIM, volume_name)
    manifest.write_text(yaml.safe_dump_all(objects))
    return manifest


@pytest.fixture
def tenant(
    node_cluster: Any, stack_overlay: Path, state: Path, sentinels: Sentinels
) -> Iterator[Stacks]:
    """A fresh namespace with the passphrase Secret; Stacks there use the ``/state`` backend.

    It comes after ``stack_overlay``: the CRD is part of what that applies.
    """
    del stack_overlay
    with tenant_namespace(node_cluster, "tenant", state, sentinels.passphrase) as stacks:
        yield stacks


@pytest.fixture(scope="session")
def pod_overlay(tmp_path_factory: pytest.TempPathFactory, image_ref: str) -> Path:
    """The operator with ``--runner=pod`` (no state volume of its own)."""
    directory = tmp_path_factory.mktemp("overlay-pod-runner")
    return deployment.write_overlay(directory, image_ref, args=(*STACK_ARGS, "--runner=pod"))


@pytest.fixture
def pod_tenant(
    node_cluster: Any, pod_overlay: Path, state: Path, sentinels: Sentinels
) -> Iterator[Stacks]:
    """The pod runner deployed, and a fresh namespace with a claim on the state directory."""
    deployment.deploy(node_cluster, pod_overlay)  # a no-op unless a test changed it
    with tenant_namespace(node_cluster, "pods", state, sentinels.passphrase, claim=True) as stacks:
        yield stacks


@pytest.fixture
def sentinels() -> Sentinels:
    """Fresh secret values that must never leak."""
    return Sentinels()
