"""Where an e2e scenario runs: its runner, control plane, namespace, git server and state.

A scenario parametrized over ``RUNNERS`` runs once per runner:

- ``local``: the session's control plane (no node), the loopback git server, and the
  operator's ``--runner=local``: programs run as its children, on this machine.
- ``agent``: as ``local``, with ``--runner=agent``: each run is the run pod's agent (the
  same job, checkout, run and report lines as in a pod) as children of the operator on
  this machine. Programs see the state directory through a link outside ``/tmp``, which
  every Stack mounts as the reconciler requires of a ``file://`` backend (``agent_bed``).
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
from testbed.plugin_mirror import PluginMirror

RUNNERS = (
    "local",
    "agent",
    pytest.param("pod", marks=[pytest.mark.node, pytest.mark.image]),
)


OFF_NODE = ("local", "agent")
"""The runners of a scenario that needs no pod: the agent path runs the pod runner's job,
agent and report channel; the node keeps what needs a pod (``docs/test-bed.md``)."""


def without_agent(why: str) -> tuple[Any, ...]:
    """``RUNNERS`` with the ``agent`` variant skipped, saying ``why`` in words."""
    skip = pytest.param("agent", marks=pytest.mark.skip(reason=f"agent runner: {why}"))
    return tuple(skip if runner == "agent" else runner for runner in RUNNERS)


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

    @property
    def on_node(self) -> bool:
        """Whether runs are pods on the node (else processes on this machine)."""
        return self.runner == "pod"


def local_bed(request: pytest.FixtureRequest, state: Path) -> Bed:
    """The local runner's bed: the session control plane, its CRD, a fresh namespace.

    Its operator installs plugins from the session's ``files_mirror`` (the YAML files
    program's provider).
    """
    request.getfixturevalue("stack_crd")
    mirror: PluginMirror = request.getfixturevalue("files_mirror")
    state.mkdir(parents=True, exist_ok=True)
    (state / "backend").mkdir(exist_ok=True)
    return Bed(
        runner="local",
        control_plane=request.getfixturevalue("control_plane"),
        namespace=request.getfixturevalue("namespace"),
        git=request.getfixturevalue("git_server"),
        state=state,
        program_state=state,
        flags=(f"--plugin-mirror={mirror.url}",),
    )


def agent_bed(request: pytest.FixtureRequest, state: Path) -> Bed:
    """The agent runner's bed: the local bed with ``--runner=agent``.

    Programs see the state where it is: the agent's steps are processes on this machine,
    and the rules about a run pod's volumes apply to runs in pods only.
    """
    local = local_bed(request, state)
    return dataclasses.replace(local, runner="agent", flags=("--runner=agent", *local.flags))


@contextlib.contextmanager
def pod_bed(request: pytest.FixtureRequest, state: Path) -> Iterator[Bed]:
    """The pod runner's bed on the node: a namespace whose claim holds ``state``."""
    cluster: NodeCluster = request.getfixturevalue("node_cluster")
    image: str = request.getfixturevalue("image_ref")
    request.getfixturevalue("node_stack_crd")
    mirror: PluginMirror = request.getfixturevalue("node_files_mirror")
    deployment.state_directory(state)
    with state_namespace(cluster, state, CLAIM) as namespace:
        yield Bed(
            runner="pod",
            control_plane=cluster.control_plane,
            namespace=namespace,
            git=request.getfixturevalue("node_git"),
            state=state,
            program_state=POD_STATE,
            flags=("--runner=pod", f"--run-image={image}", f"--plugin-mirror={mirror.url}"),
            workspace=deployment.state_workspace(CLAIM, str(POD_STATE)),
            owner=UID,
        )
