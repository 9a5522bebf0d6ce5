"""Fixtures of the operator-on-the-node tests (imported by ``tests/node/conftest.py``).

Session-scoped where setting up is slow: the image is imported into the node once, one
git server and one state directory serve every test, one overlay is applied (and only
rolled out again when a test changed the Deployment).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.git_server import GitServer
from testbed.image import save_archive
from testbed.node import deployment
from testbed.node.deployment import UID
from tests.e2e.conftest import Sentinels, Stacks
from tests.status.invariants import StackWatcher

# Short periods so that scenarios finish in seconds (appended: a later flag wins). The
# shutdown timeout is short so that a rollout interrupts a slow update instead of
# draining it.
STACK_ARGS = ("--resync-period=2", "--update-retry-base=1", "--shutdown-timeout=5")


@pytest.fixture(scope="session")
def image_ref(node_cluster: Any, operator_image: Any) -> str:
    """The operator's image, imported into the node's containerd."""
    node_cluster.load_image(save_archive(operator_image), operator_image.ref)
    return str(operator_image.ref)


@pytest.fixture(scope="session")
def git(node_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitServer]:
    """A git daemon on the host end of the node's network: pods clone from it."""
    server = GitServer(tmp_path_factory.mktemp("node-git"), host=node_cluster.host_ip)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The host directory mounted at ``/state`` in the operator's pods (owned by its uid)."""
    root = tmp_path_factory.mktemp("node-state")
    (root / "backend").mkdir()
    for path in (root, root / "backend"):
        os.chown(path, UID, UID)
    return root


@pytest.fixture(scope="session")
def stack_overlay(
    node_cluster: Any, tmp_path_factory: pytest.TempPathFactory, image_ref: str, state: Path
) -> Path:
    """The overlay the Stack scenarios run under (image, state volume, short periods), applied.

    Tests apply it again first thing (a no-op unless an earlier test changed the
    Deployment), so that each starts from it whatever ran before.
    """
    directory = tmp_path_factory.mktemp("overlay-stacks")
    overlay = deployment.write_overlay(directory, image_ref, args=STACK_ARGS, state=state)
    deployment.deploy(node_cluster, overlay)
    return overlay


@pytest.fixture
def tenant(
    node_cluster: Any, stack_overlay: Path, state: Path, sentinels: Sentinels
) -> Iterator[Stacks]:
    """A fresh namespace with the passphrase Secret; Stacks there use the ``/state`` backend.

    It comes after ``stack_overlay``: the CRD is part of what that applies.
    """
    del stack_overlay
    namespace = f"tenant-{secrets.token_hex(4)}"
    node_cluster.kubectl("create", "namespace", namespace)
    with node_cluster.api_client() as api, StackWatcher(api, namespace) as watcher:
        stacks = Stacks(api, namespace, state / "backend")
        stacks.watcher = watcher
        stacks.secret("pulumi-secrets", {"passphrase": sentinels.passphrase})
        yield stacks
        watcher.assert_clean()
    node_cluster.kubectl("delete", "namespace", namespace, "--wait=false")


@pytest.fixture
def sentinels() -> Sentinels:
    """Fresh secret values that must never leak."""
    return Sentinels()
