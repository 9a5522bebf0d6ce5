"""kube-controller-manager beside a test control plane: namespaces finish, owners collect.

The loopback ``ControlPlane`` runs no controllers, as envtest's does: a deleted Namespace
stays ``Terminating`` and nothing is garbage-collected, so an owner deleted with foreground
propagation (the Kubernetes provider deletes that way) keeps its ``foregroundDeletion``
finalizer for ever. ``ControllerManager`` runs the real kube-controller-manager (the node
recipe's build) against such a control plane with only the ``namespace`` and
``garbagecollector`` controllers, no leader election, its health port on a free loopback
port, its certificates and log under its own directory, as ``system:kube-controller-manager``
in ``system:masters`` (it deletes every kind of object, as those two controllers must).

While it runs, the garbage collector also deletes any object whose ownerReferences point at
an owner that does not exist: start it only where nothing relies on made-up owners.
"""

from __future__ import annotations

import os
import ssl
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from testbed.assets import find_built
from testbed.control_plane import ControlPlane
from testbed.process import Process, free_port

CONTROLLERS = ("namespace", "garbagecollector")
USER = "system:kube-controller-manager"
# Where kube-controller-manager writes when not told otherwise; each is configured away, and
# ``leftovers()`` reports any that appeared while it ran.
_HOST_DEFAULTS = (Path("/var/run/kubernetes"), Path("/usr/libexec/kubernetes"))


def find_binary(*, build: bool = False) -> Path:
    """The kube-controller-manager of the ``node`` recipe.

    Raises:
        AssetError: the node's binaries are not built and ``build`` is false; the message
            names the command (``hack/test-assets --with node``).
    """
    return find_built("node", build=build) / "kube-controller-manager"


class ControllerManager:
    """One kube-controller-manager process for a ``ControlPlane``; see the module."""

    def __init__(
        self,
        binary: Path,
        plane: ControlPlane,
        root: Path,
        controllers: Sequence[str] = CONTROLLERS,
    ) -> None:
        """Prepare (not start) it for the running ``plane``; its files live under ``root``."""
        self.binary, self.plane, self.root = binary, plane, root
        self.controllers = tuple(controllers)
        self.port = free_port()
        self._process: Process | None = None
        self._pid: int | None = None
        self._defaults_before = {p for p in _HOST_DEFAULTS if p.exists()}

    @property
    def log_path(self) -> Path:
        """Its log file (stdout and stderr)."""
        return self.root / "logs" / "kube-controller-manager.log"

    @property
    def process(self) -> Process | None:
        """The process, once started."""
        return self._process

    def start(self) -> None:
        """Start it and wait until its health endpoint answers ok.

        Raises:
            ProcessError: it exited, or was not healthy in time (the message has its log).
        """
        self.root.mkdir(parents=True, exist_ok=True)
        kubeconfig = self.plane.add_user(USER, ["system:masters"])
        process = Process("kube-controller-manager", self._argv(kubeconfig), self.log_path.parent)
        self._process = process
        process.start(lambda: _https_status(f"https://127.0.0.1:{self.port}/healthz") == 200)
        self._pid = process.pid

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL); safe to call twice."""
        if self._process is not None:
            self._process.stop()

    def leftovers(self) -> list[str]:
        """What of it is still on the machine: a live process, default directories it made."""
        found = [p for p in _HOST_DEFAULTS if p.exists() and p not in self._defaults_before]
        if self._pid is not None and _alive(self._pid):
            found.append(Path(f"/proc/{self._pid}"))
        return [str(p) for p in found]

    def _argv(self, kubeconfig: Path) -> list[str]:
        return [
            str(self.binary),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--controllers={','.join(self.controllers)}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--cert-dir={self.root / 'certs'}",
            # Its default is under /usr/libexec, which it would create on the host.
            f"--flex-volume-plugin-dir={self.root / 'flex-volumes'}",
            "--v=1",
        ]


def _https_status(url: str) -> int:
    """The status of a GET of ``url``, trusting any certificate (its own self-signed one)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(url, timeout=2, context=context) as response:  # noqa: S310
        return int(response.status)


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
