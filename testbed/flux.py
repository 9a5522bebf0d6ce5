"""The real Flux source-controller beside a test control plane: Git sources to artifacts.

``SourceController`` runs the ``flux`` recipe's ``source-controller`` (``testbed.assets``)
as a process on this machine against one control plane (a kubeconfig and the kubectl that
reaches it). ``start()`` server-side applies the CRDs it needs (``FLUX_SOURCE_CRDS``, from
its Go module at the same version), waits until they are Established, then starts it with
no leader election, watching every namespace, its health and metrics endpoints on free
loopback ports, and its artifact server bound to ``host`` on a free port and advertised as
that same ``host:port`` (``storage_address``): ``127.0.0.1`` by default, the node
cluster's ``host_ip`` for a test whose pods fetch artifacts. It returns once the health
endpoint says ready and the artifact server answers.

Helpers, through the Kubernetes API: ``git_repository`` creates a
``source.toolkit.fluxcd.io/v1`` GitRepository (``credentials`` the basic-auth Secret it may
name), ``reconcile_now`` asks for a reconcile at once (as ``flux reconcile`` does) and
``wait_artifact`` returns ``status.artifact`` once the object is Ready for its generation.

Guarantees: every file it writes (artifacts, clones under ``TMPDIR``, ``HOME``) and its log
live under ``root``; ``stop()`` (SIGTERM, then SIGKILL) is safe to call twice and
``leftovers()`` names a process still alive afterwards. The CRDs stay installed (as the
Stack CRD does): deleting them would hang on the finalizers of objects the stopped
controller can no longer remove.
"""

from __future__ import annotations

import datetime
import os
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes import client, config

from testbed.assets import find_built, find_flux_crds
from testbed.control_plane import Kubectl, wait_established
from testbed.process import Process, Served, free_port
from testbed.waits import wait_for

GROUP, VERSION = "source.toolkit.fluxcd.io", "v1"
PLURALS = {
    "GitRepository": "gitrepositories",
    "OCIRepository": "ocirepositories",
    "Bucket": "buckets",
    "HelmRepository": "helmrepositories",
    "HelmChart": "helmcharts",
}
LOOPBACK = "127.0.0.1"
ARTIFACT_TIMEOUT = 120.0  # seconds for a fetch, a tarball and a status update
RECONCILE_ANNOTATION = "reconcile.fluxcd.io/requestedAt"


def find_binary(*, build: bool = True) -> Path:
    """The ``flux`` recipe's ``source-controller`` (built from its Go module when missing).

    Raises:
        AssetError: not built and ``build`` is false (the message names the command), or
            the build failed.
    """
    return find_built("flux", build=build) / "source-controller"


class SourceController(Served):
    """One source-controller process for one control plane; see the module."""

    def __init__(
        self,
        binary: Path,
        kubeconfig: Path,
        kubectl: Kubectl,
        root: Path,
        *,
        host: str = LOOPBACK,
    ) -> None:
        """Prepare (not start) it; ``kubectl(*args, check=…)`` reaches the same cluster.

        ``host`` is the address the artifact server binds to and advertises: one this
        machine reaches and, for a node test, the node's pods (its ``host_ip``).
        """
        self.binary, self.kubeconfig, self.kubectl, self.root = binary, kubeconfig, kubectl, root
        self.host = host
        self.storage_port, self.health_port, self.metrics_port = (free_port() for _ in range(3))
        self._process: Process | None = None
        self._pid: int | None = None

    @property
    def storage_address(self) -> str:
        """``host:port`` of the artifact server, as artifact URLs name it."""
        return f"{self.host}:{self.storage_port}"

    @property
    def metrics_url(self) -> str:
        """Its Prometheus metrics endpoint (controller-runtime's and Flux's ``gotk_*``)."""
        return f"http://{LOOPBACK}:{self.metrics_port}/metrics"

    @property
    def log_path(self) -> Path:
        """Its log file (stdout and stderr, JSON lines)."""
        return self.root / "logs" / "source-controller.log"

    def start(self) -> None:
        """Install its CRDs, start it, and wait until it is ready and serves artifacts.

        Raises:
            ProcessError: it exited, or was not ready in time (the message has its log).
        """
        self.install_crds()
        for directory in ("storage", "tmp", "home"):
            (self.root / directory).mkdir(parents=True, exist_ok=True)
        process = Process("source-controller", self._argv(), self.log_path.parent, self._env())
        self._process = process
        process.start(self._ready)
        self._pid = process.pid

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL); safe to call twice."""
        if self._process is not None:
            self._process.stop()

    def leftovers(self) -> list[str]:
        """What of it is still on the machine after ``stop``: its process, if alive."""
        if self._pid is not None and _alive(self._pid):
            return [f"/proc/{self._pid}"]
        return []

    def install_crds(self) -> None:
        """Server-side apply ``FLUX_SOURCE_CRDS`` and wait until each is Established."""
        for crd in find_flux_crds():
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
        for plural in PLURALS.values():
            wait_established(self.kubectl, f"{plural}.{GROUP}")

    def credentials(self, namespace: str, name: str, username: str, password: str) -> None:
        """Create the Secret ``name`` a GitRepository's ``secretRef`` names (basic auth)."""
        secret = client.V1Secret(
            metadata=client.V1ObjectMeta(name=name),
            string_data={"username": username, "password": password},
        )
        with self._api() as api:
            client.CoreV1Api(api).create_namespaced_secret(namespace, secret)

    def git_repository(
        self,
        namespace: str,
        name: str,
        url: str,
        branch: str,
        interval: str = "1m",
        *,
        secret: str | None = None,
    ) -> dict[str, Any]:
        """Create a GitRepository following ``branch`` of ``url``; the object as stored.

        ``secret`` names a Secret of the namespace with its credentials (``credentials``).
        """
        spec: dict[str, Any] = {"url": url, "interval": interval, "ref": {"branch": branch}}
        if secret is not None:
            spec["secretRef"] = {"name": secret}
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "GitRepository",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
        with self._api() as api:
            created: dict[str, Any] = client.CustomObjectsApi(api).create_namespaced_custom_object(  # type: ignore[assignment]
                GROUP, VERSION, namespace, PLURALS["GitRepository"], body
            )
        return created

    def get(self, namespace: str, name: str, kind: str = "GitRepository") -> dict[str, Any]:
        """Read one source object of ``kind``."""
        with self._api() as api:
            found: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(  # type: ignore[assignment]
                GROUP, VERSION, namespace, PLURALS[kind], name
            )
        return found

    def patch(
        self, namespace: str, name: str, body: dict[str, Any], kind: str = "GitRepository"
    ) -> None:
        """Merge-patch one source object of ``kind`` with ``body``."""
        with self._api() as api:
            client.CustomObjectsApi(api).patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURALS[kind], name, body
            )

    def reconcile_now(self, namespace: str, name: str, kind: str = "GitRepository") -> None:
        """Ask for a reconcile before the interval ends (``flux reconcile``'s annotation)."""
        now = datetime.datetime.now(datetime.UTC).isoformat()
        patch = {"metadata": {"annotations": {RECONCILE_ANNOTATION: now}}}
        with self._api() as api:
            client.CustomObjectsApi(api).patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURALS[kind], name, patch
            )

    def wait_artifact(
        self,
        namespace: str,
        name: str,
        kind: str = "GitRepository",
        *,
        revision: str | None = None,
        timeout: float = ARTIFACT_TIMEOUT,
    ) -> dict[str, Any]:
        """``status.artifact`` (``url``, ``revision``, ``digest``…) once Ready=True.

        Ready must be about the object's current generation, and with ``revision`` the
        artifact must be of that revision (``<branch>@sha1:<sha>`` for a GitRepository).

        Raises:
            AssertionError: not so within ``timeout`` (the message has the last status).
        """
        last: dict[str, Any] = {}

        def artifact() -> dict[str, Any] | None:
            last.update(self.get(namespace, name, kind))
            found = ready_artifact(last)
            return found if found and revision in (None, found.get("revision")) else None

        return wait_for(
            artifact,
            f"the {kind} {namespace}/{name} to be Ready with an artifact"
            + (f" of {revision}" if revision else ""),
            timeout,
            0.25,
            detail=lambda: repr(last.get("status")),
        )

    def _api(self) -> client.ApiClient:
        api: client.ApiClient = config.new_client_from_config(config_file=str(self.kubeconfig))
        return api

    def _ready(self) -> bool:
        ready = _status(f"http://{LOOPBACK}:{self.health_port}/readyz") == 200
        return ready and _status(f"http://{self.storage_address}/") == 200

    def _argv(self) -> list[str]:
        return [
            str(self.binary),
            "--enable-leader-election=false",
            "--watch-all-namespaces=true",
            f"--storage-path={self.root / 'storage'}",
            f"--storage-addr={self.storage_address}",
            f"--storage-adv-addr={self.storage_address}",
            f"--health-addr={LOOPBACK}:{self.health_port}",
            f"--metrics-addr={LOOPBACK}:{self.metrics_port}",
            "--log-level=debug",
        ]

    def _env(self) -> dict[str, str]:
        """This process's environment, pointed at the cluster and at ``root`` for its files.

        ``RUNTIME_NAMESPACE`` is where it would watch without ``--watch-all-namespaces``.
        """
        return {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "RUNTIME_NAMESPACE": "flux-system",
            "TMPDIR": str(self.root / "tmp"),
            "HOME": str(self.root / "home"),
        }


def ready_artifact(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """``status.artifact`` of a source object that is Ready=True for its generation, or None."""
    status = obj.get("status") or {}
    if status.get("observedGeneration") != obj["metadata"]["generation"]:
        return None
    conditions = status.get("conditions") or []
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    artifact: dict[str, Any] | None = status.get("artifact")
    return artifact if ready else None


def _status(url: str) -> int:
    with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - our own endpoint
        return int(response.status)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
