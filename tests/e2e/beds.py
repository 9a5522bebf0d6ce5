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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.control_plane import ControlPlane
from testbed.git_server import GitServer
from testbed.node import NodeCluster, deployment
from testbed.node.deployment import UID
from testbed.node.tenancy import state_namespace

RUNNERS = ("local", pytest.param("pod", marks=[pytest.mark.node, pytest.mark.image]))
POD_STATE = Path("/e2e-state")  # where run pods mount the test's state directory
CLAIM = "e2e-state"


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
    with state_namespace(cluster, state, CLAIM) as namespace:
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
