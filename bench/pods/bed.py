"""The pods benchmark's bed: a node cluster of its own, and namespaces for either runner.

``PodBed`` (``with`` starts and stops it) starts a ``testbed.node.NodeCluster`` of
``nodes`` nodes (control plane, scheduler, controller-manager, and per node a kubelet and
containerd in a network namespace of its own), imports the operator's image into each
node (``testbed.image``: built, or found unchanged, by content), starts a git server and
the npm/PyPI mirror on the node's host address (run pods have no internet), applies the
Stack CRD and pushes the cached TypeScript program (``node-outputs``, under ``app/``) as
one commit, which every Stack pins. ``stop`` stops all of it and raises if the cluster
left anything on the machine (``leftovers``).

``tenant(prefix)`` is a namespace for the pod runner as the e2e ``pod`` bed makes it: a
claim on a host directory holding the Stacks' ``file://`` backend, mounted into every run
pod through the Stack's ``workspaceTemplate`` (with the mirror's variables), and the
dependency cache claim the operator mounts into run pods. ``tenant(prefix, pod=False)`` is
one for the local runner: its backend is a host directory the operator reads directly.
Both hold the passphrase Secret. ``operator`` prepares an operator process on this cluster;
``node_cpu`` is the CPU time the nodes' pods have used (their cgroups, every node summed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client

from bench.operator import Operator
from bench.programs import PROGRAMS, TYPESCRIPT
from bench.running import Running
from bench.testbed import (
    PASSPHRASE_SECRET,
    STACK_CRD,
    TestBed,
    admin_client,
    passphrase_namespace,
    passphrase_secret,
    push_program,
)
from testbed.assets import cache_root
from testbed.git_server import GitServer
from testbed.image import build_image, missing_tools, save_archive
from testbed.node import NodeBinaries, NodeCluster, deployment, missing_host_tools
from testbed.node.image_store import Archive
from testbed.node.tenancy import apply_stack_crd, cache_claim, state_namespace, with_env
from testbed.package_mirror import PackageMirror
from testbed.package_mirror import env as mirror_env

PROGRAM = TYPESCRIPT.program  # bench.programs' cached TypeScript program: node-outputs
POD_STATE = Path("/bench-state")  # where run pods mount their namespace's state claim
STATE_CLAIM = "bench-state"
NOT_STARTED = "the pods benchmark's bed is not started"


@dataclasses.dataclass(frozen=True)
class Tenant:
    """A namespace for one runner: its Stacks' backend URL and ``workspaceTemplate``."""

    namespace: str
    backend: str
    workspace: dict[str, Any] | None


class PodBed(Running):
    """The node cluster and what its run pods need; see the module docstring."""

    def __init__(self, bench: TestBed, progress: Callable[[str], None], nodes: int = 1) -> None:
        """Prepare (not start) ``nodes`` nodes; operators as the bench's.

        Each bed has a directory of its own under the bench's root (``pods-*``): one run
        starts two (the pods benchmark's, then PKO v2's), and the second must not find the
        first's git repositories and checkouts.
        """
        self.bench, self._say = bench, progress
        self.root = Path(tempfile.mkdtemp(prefix="pods-", dir=bench.root))
        self.nodes = nodes
        self.cluster: NodeCluster | None = None
        self.git: GitServer | None = None
        self.mirror: PackageMirror | None = None
        self.image = self.repo_url = self.commit = ""
        self._api: client.ApiClient | None = None
        self._tenants = contextlib.ExitStack()
        self._count = 0  # tenants made
        self._mirror_env: dict[str, str] = {}  # the package mirror's, for run pods

    def start(self) -> None:
        """Build or find the image, start the cluster with it, serve git and packages, push."""
        _check_host()
        self._say("pods: the operator's image (built, or found unchanged by content)")
        image = build_image()
        archive = save_archive(image)
        self._say(f"pods: starting a node cluster of {self.nodes}, the image seeded into each")
        binaries = NodeBinaries.find()
        seeded = [Archive(archive, image.ref)]
        cluster = NodeCluster(self.root / "node", binaries, nodes=self.nodes, images=seeded)
        self.cluster = cluster
        cluster.start()
        cluster.load_image(archive, image.ref)  # checked only: the seed holds it
        self.image = image.ref
        self.git = GitServer(self.root / "git", host=cluster.host_ip)
        self.git.start()
        self.mirror = PackageMirror(cache_root() / "package-mirror", host=cluster.host_ip)
        self.mirror.start()
        self._mirror_env = mirror_env(self.mirror)
        apply_stack_crd(cluster, STACK_CRD)
        self._api = admin_client(cluster.kubeconfig)
        program = PROGRAMS / PROGRAM
        self.repo_url, self.commit = push_program(
            self.git, self.root / "checkouts", program, PROGRAM
        )

    def stop(self) -> None:
        """Stop everything; raises ``RuntimeError`` if the cluster left anything behind."""
        try:
            self._tenants.close()
        finally:
            if self._api is not None:
                self._api.close()
            if self.mirror is not None:
                self.mirror.stop()
            if self.git is not None:
                self.git.stop()
            if self.cluster is not None:
                self.cluster.stop()
        leftovers = self.cluster.leftovers() if self.cluster is not None else []
        if leftovers:
            msg = f"the node cluster left these behind: {leftovers}"
            raise RuntimeError(msg)

    @property
    def node(self) -> NodeCluster:
        """The running cluster."""
        if self.cluster is None:
            raise RuntimeError(NOT_STARTED)
        return self.cluster

    @property
    def api(self) -> client.ApiClient:
        """The bench's admin API client of the cluster (shared; thread-safe, pooled)."""
        if self._api is None:
            raise RuntimeError(NOT_STARTED)
        return self._api

    def node_cpu(self) -> float:
        """CPU seconds every pod on the nodes has used so far (each node's cgroup parent)."""
        return sum(member.cgroups.cpu_seconds() for member in self.node.members)

    def tenant(self, prefix: str, *, pod: bool = True) -> Tenant:
        """A fresh namespace for the pod runner (``pod=False``: the local runner)."""
        self._count += 1
        directory = self.root / "tenants" / f"{prefix}-{self._count}"
        if not pod:
            (directory / "backend").mkdir(parents=True)
            namespace = passphrase_namespace(self.api, prefix)
            return Tenant(namespace, f"file://{directory / 'backend'}", None)
        state = deployment.state_directory(directory / "state")
        namespace = self._tenants.enter_context(
            state_namespace(self.node, state, STATE_CLAIM, prefix)
        )
        self._tenants.enter_context(cache_claim(self.node, namespace, directory / "cache"))
        passphrase_secret(self.api, namespace)
        workspace = deployment.state_workspace(STATE_CLAIM, str(POD_STATE))
        url = f"file://{POD_STATE / 'backend'}"
        return Tenant(namespace, url, with_env(workspace, self._mirror_env))

    def spec(self, tenant: Tenant, name: str, value: str) -> dict[str, Any]:
        """The spec of Stack ``name`` of the program in ``tenant``, its ``value`` config set."""
        spec: dict[str, Any] = {
            "stack": name,
            "backend": tenant.backend,
            "projectRepo": self.repo_url,
            "commit": self.commit,
            "repoDir": "app",
            "config": {"value": value},
            "envRefs": {
                "PULUMI_CONFIG_PASSPHRASE": {
                    "type": "Secret",
                    "secret": {"name": PASSPHRASE_SECRET, "key": "passphrase"},
                }
            },
        }
        if tenant.workspace is not None:
            spec["workspaceTemplate"] = tenant.workspace
        return spec

    def operator(self, tenants: list[Tenant], *flags: str, pod: bool = True) -> Operator:
        """An operator (not started) watching ``tenants``; ``pod``: with the pod runner."""
        runner = ("--runner=pod", f"--run-image={self.image}") if pod else ("--runner=local",)
        first, *rest = (t.namespace for t in tenants)
        return Operator(
            self.bench,
            first,
            *runner,
            *flags,
            work_dir=self.root / ("work-pod" if pod else "work-local"),
            kubeconfig=self.node.kubeconfig,
            also_watch=rest,
        )


def _check_host() -> None:
    """Raise ``RuntimeError`` naming what this machine lacks for a node cluster and image."""
    if os.geteuid() != 0:
        raise RuntimeError("the pods benchmark needs root (network namespaces, mounts, cgroups)")
    missing = missing_host_tools() + missing_tools()
    if missing:
        msg = f"not installed: {', '.join(missing)} (hack/install-node, hack/install-image-tools)"
        raise RuntimeError(msg)
