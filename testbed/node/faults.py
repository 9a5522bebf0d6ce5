"""Faults of a running ``NodeCluster`` for tests: one node daemon, or the kube-apiserver, down.

``NodeFaults(cluster, node=1)`` stops, kills and starts one component of node ``node``
(``containerd``, ``kubelet``, ``kube-proxy``) while the others go on, through that node's
supervisor's control directory (``testbed/node/supervisor.py``): a component stopped on
request is not a failure of the node. Stopping kubelet or containerd leaves the containers
running (their shims are processes of their own), as ``systemctl restart`` on a real node
does.

Guarantees:

* ``stop``/``kill`` return once the component's process has exited; ``start`` once it is
  healthy again: containerd answers ``ctr version``, kubelet has posted a Ready heartbeat
  since it started, kube-proxy's ``/healthz`` answers; each within ``timeout`` seconds, or
  ``AssertionError`` naming what did not happen.
* ``stopped(name)`` and ``apiserver_down()`` are context managers that start what they
  stopped again on the way out, whatever happened inside (a failed test restores the
  node).
"""

from __future__ import annotations

import contextlib
import secrets
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime

from kubernetes import client

from testbed.node.cluster import NodeCluster
from testbed.node.member import NodeMember
from testbed.waits import wait_for

COMPONENTS = ("containerd", "kubelet", "kube-proxy")
TIMEOUT = 120.0  # seconds a component may take to stop (its stop_timeout: 10) or be healthy


class NodeFaults:
    """Stop and start the node's daemons and the kube-apiserver (module docstring)."""

    def __init__(self, cluster: NodeCluster, node: int = 1) -> None:
        """Inject faults into node ``node`` (1, 2, ...) of ``cluster``, which runs."""
        self.cluster = cluster
        self.member: NodeMember = cluster.members[node - 1]
        self.control = self.member.layout.path("control")
        self.control.mkdir(exist_ok=True)

    def stop(self, name: str, *, timeout: float = TIMEOUT) -> None:
        """SIGTERM the component (SIGKILL after 10 s); returns once it has exited."""
        self._request(name, "stop", timeout)

    def kill(self, name: str, *, timeout: float = TIMEOUT) -> None:
        """SIGKILL the component, as a crash would; returns once it has exited."""
        self._request(name, "kill", timeout)

    def start(self, name: str, *, timeout: float = TIMEOUT) -> None:
        """Start the stopped component; returns once it is healthy (module docstring)."""
        since = datetime.now(UTC).replace(microsecond=0)
        self._request(name, "start", timeout)
        wait_for(
            lambda: self._healthy(name, since),
            f"{name} healthy after its start",
            timeout,
            ignoring=(OSError, client.ApiException, subprocess.SubprocessError),
        )

    def restart(self, name: str, *, kill: bool = False, timeout: float = TIMEOUT) -> None:
        """Stop (``kill``: SIGKILL) and start the component; returns once it is healthy."""
        with self.stopped(name, kill=kill, timeout=timeout):
            pass

    @contextlib.contextmanager
    def stopped(self, name: str, *, kill: bool = False, timeout: float = TIMEOUT) -> Iterator[None]:
        """The component stopped (``kill``: SIGKILL) inside; started again on the way out."""
        try:
            if kill:
                self.kill(name, timeout=timeout)
            else:
                self.stop(name, timeout=timeout)
            yield
        finally:
            self.start(name, timeout=timeout)

    @contextlib.contextmanager
    def apiserver_down(self) -> Iterator[float]:
        """kube-apiserver killed (SIGKILL) inside, etcd running; started again on the way out.

        Yields the ``time.monotonic()`` at which it went down. On the way out the
        controller manager and the scheduler restart too, once the API server is back, as
        they do in a cluster where the outage outlasts their leases
        (``NodeCluster.restart_host_components``).
        """
        plane = self.cluster.control_plane
        plane.stop_apiserver()
        try:
            yield time.monotonic()
        finally:
            plane.start_apiserver()
            self.cluster.restart_host_components()

    def node_ready(self, *, since: datetime | None = None) -> bool:
        """Whether the Node is Ready (with a heartbeat at or after ``since``, if given)."""
        with self.cluster.api_client() as api:
            node = client.CoreV1Api(api).read_node(self.member.name)
        for condition in (node.status.conditions if node.status else None) or []:
            if condition.type == "Ready" and condition.status == "True":
                beat = condition.last_heartbeat_time
                return since is None or (beat is not None and beat >= since)
        return False

    # -- internals ---------------------------------------------------------------------

    def _request(self, name: str, action: str, timeout: float) -> None:
        """Ask the supervisor for ``action`` on ``name``; returns once it says it is done."""
        if name not in COMPONENTS:
            msg = f"no node component {name!r}: one of {COMPONENTS}"
            raise ValueError(msg)
        request = f"{action} {secrets.token_hex(4)}"
        pending = self.control / f"{name}.tmp"
        pending.write_text(request)
        pending.rename(self.control / f"{name}.want")  # whole, as the supervisor reads it
        done = self.control / f"{name}.done"
        wait_for(
            lambda: done.exists() and done.read_text().strip() == request,
            f"the node's supervisor to {action} {name}",
            timeout,
            interval=0.2,
            detail=self._supervisor_log,
        )

    def _healthy(self, name: str, since: datetime) -> bool:
        if name == "containerd":
            socket = str(self.member.layout.containerd_socket)
            argv = ["ctr", "--address", socket, "version"]
            return (
                subprocess.run(argv, capture_output=True, timeout=10, check=False).returncode == 0
            )
        if name == "kubelet":
            return self.node_ready(since=since)
        url = f"http://{self.member.node_ip}:10256/healthz"
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status) == 200

    def _supervisor_log(self) -> str:
        log = self.member.supervisor_log
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        return "\n".join(lines[-15:])
