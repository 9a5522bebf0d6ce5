"""Where an e2e scenario runs: its runner, control plane, namespace, git server and state.

A scenario parametrized over ``RUNNERS`` runs once per runner:

- ``local``: the session's control plane (no node), the loopback git server, and the
  operator's ``--runner=local``: programs run as its children, on this machine.
- ``pod``: the single-node cluster, a git server on the host end of the node's network,
  and ``--runner=pod --run-image=<the operator's image>``: each run is a pod on the node,
  in the test's namespace, as its ``default`` ServiceAccount. The test's state directory
  (the Stacks' ``file://`` backend and the files their program writes) stays on this
  machine: a hostPath PersistentVolume bound to a claim in the namespace, which every
  Stack's ``workspaceTemplate`` mounts at ``POD_STATE``. A Stack names paths as its
  program sees them (``Stacks.program_path``); the test reads them where they are
  (``Stacks.target``). The run pods write as ``UID``: whatever the test itself writes
  into the backend it hands back to them (``Stacks.hand_over``).

An unparametrized scenario gets the ``local`` bed. The operator itself is always a
process on this machine (``tests.e2e.conftest.operator``); ``tests/node`` covers it
deployed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from testbed.control_plane import ControlPlane, wait_established
from testbed.git_server import GitServer
from testbed.node import NodeCluster, deployment
from testbed.node.deployment import UID
from testbed.waits import wait_for

RUNNERS = ("local", pytest.param("pod", marks=[pytest.mark.node, pytest.mark.image]))
POD_STATE = Path("/e2e-state")  # where run pods mount the test's state directory
CLAIM = "e2e-state"
SERVICE_ACCOUNT_TIMEOUT = 60.0


@dataclasses.dataclass(frozen=True)
class Bed:
    """One scenario's surroundings.

    ``state`` is the state directory on this machine, ``program_state`` the same
    directory as programs see it; ``flags`` are the runner's operator flags;
    ``workspace`` is the ``workspaceTemplate`` every Stack gets (None: none);
    ``owner`` the uid that programs write the state as (None: this process's).
    """

    runner: str
    control_plane: ControlPlane
    namespace: str
    git: GitServer
    state: Path
    program_state: Path
    flags: tuple[str, ...] = ()
    workspace: dict[str, Any] | None = None
    owner: int | None = None


def local_bed(request: pytest.FixtureRequest, state: Path) -> Bed:
    """The local runner's bed: the session control plane, its CRD, a fresh namespace."""
    request.getfixturevalue("stack_crd")
    state.mkdir(parents=True, exist_ok=True)
    (state / "backend").mkdir(exist_ok=True)
    return Bed(
        runner="local",
        control_plane=request.getfixturevalue("control_plane"),
        namespace=request.getfixturevalue("namespace"),
        git=request.getfixturevalue("git_server"),
        state=state,
        program_state=state,
    )


@contextlib.contextmanager
def pod_bed(request: pytest.FixtureRequest, state: Path) -> Iterator[Bed]:
    """The pod runner's bed on the node: a namespace whose claim holds ``state``."""
    cluster: NodeCluster = request.getfixturevalue("node_cluster")
    image: str = request.getfixturevalue("image_ref")
    request.getfixturevalue("node_stack_crd")
    deployment.state_directory(state)
    with state_namespace(cluster, state) as namespace:
        yield Bed(
            runner="pod",
            control_plane=cluster.control_plane,
            namespace=namespace,
            git=request.getfixturevalue("node_git"),
            state=state,
            program_state=POD_STATE,
            flags=("--runner=pod", f"--run-image={image}"),
            workspace=deployment.state_workspace(CLAIM, str(POD_STATE)),
            owner=UID,
        )


@contextlib.contextmanager
def state_namespace(cluster: NodeCluster, state: Path) -> Iterator[str]:
    """A fresh namespace with the claim ``CLAIM`` on ``state`` and its default SA.

    Pods of a namespace can only be created once its ``default`` ServiceAccount exists
    (kube-controller-manager makes it), so this returns only then. The namespace and the
    volume are deleted afterwards, without waiting.
    """
    namespace = f"e2e-{secrets.token_hex(4)}"
    volume = f"e2e-state-{namespace}"
    manifest = state.parent / f"{namespace}-state.yaml"
    objects = deployment.state_volume(state, namespace, CLAIM, volume)
    manifest.write_text(yaml.safe_dump_all([_namespace(namespace), *objects]))
    cluster.kubectl("apply", "-f", str(manifest))
    try:
        with cluster.api_client() as api:
            core = client.CoreV1Api(api)
            wait_for(
                lambda: _has_service_account(core, namespace),
                f"the default ServiceAccount of {namespace}",
                SERVICE_ACCOUNT_TIMEOUT,
            )
        yield namespace
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")
        cluster.kubectl("delete", "pv", volume, "--wait=false")


def apply_stack_crd(cluster: NodeCluster, crd: Path) -> None:
    """Apply the Stack CRD and the Program CRD beside it on the node; wait until Established."""
    for path in (crd, crd.with_name("programs.pulumi.com.yaml")):
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    wait_established(cluster.kubectl, "stacks.pulumi.com")
    wait_established(cluster.kubectl, "programs.pulumi.com")


def _namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _has_service_account(core: client.CoreV1Api, namespace: str) -> bool:
    try:
        core.read_namespaced_service_account("default", namespace)
    except client.ApiException as err:
        if err.status == 404:
            return False
        raise
    return True
