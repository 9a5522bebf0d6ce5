"""PKO v2's manager as a process on this machine, driving workspace pods on the node cluster.

Like our operator in the pods benchmark, the manager runs on the host with the cluster's
admin kubeconfig, as its Deployment would run it but for what a host process needs:

- ``AGENT_IMAGE`` is PKO v2's own image (``bench.peer.pko_v2_image``), imported into the
  node, with ``AGENT_IMAGE_PULL_POLICY=Never``: the workspace pods' init containers copy
  the agent and tini from it;
- ``POD_NAMESPACE``/``POD_SA_NAME`` name the ServiceAccount whose tokens the manager
  requests to call the agents (``grant`` creates it with the rights PKO's manifests give:
  ``use`` on ``workspaces/rpc``), and each workspace's ServiceAccount (``default`` of the
  Stack's namespace) may review tokens (``system:auth-delegator``, as PKO's docs ask);
- ``HTTPS_PROXY`` is the bench's CONNECT proxy (``bench.peer.pko_v2_proxy``: the agents'
  names resolve there), ``NO_PROXY`` the API server's host;
- ``SSL_CERT_FILE`` is the bench's git server's CA (the manager lists the repository's
  refs over HTTPS);
- leader election off, metrics served without TLS on a free loopback port (``counter``
  reads client-go's ``rest_client_requests_total`` there), the probes and the program
  file server on free loopback ports; every other setting is PKO's default (25 workers).

``start`` returns once ``/readyz`` answers; ``stop`` sends SIGTERM, then SIGKILLs the
process group after ``bench.spawned.STOP_TIMEOUT`` s.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench.peer.pko_v2_build import Built
from bench.peer.pko_v2_image import IMAGE
from bench.running import Running
from bench.spawned import Spawned, log_tail
from testbed.node import NodeCluster
from testbed.process import free_port
from testbed.waits import wait_for

SYSTEM_NAMESPACE = "pko-system"
MANAGER_ACCOUNT = "controller-manager"
INIT_CONFLICT = "unable to update the workspace pod; deleting the pod to retry later"
READY_TIMEOUT = 120.0


class PkoV2Manager(Running):
    """The manager process; see the module docstring."""

    def __init__(
        self, built: Built, cluster: NodeCluster, proxy_url: str, ca_file: Path, root: Path
    ) -> None:
        """Prepare (not start); its home and log under ``root``."""
        self.built, self.cluster, self.proxy_url = built, cluster, proxy_url
        self.ca_file = ca_file
        self.home, self.log = root / "pko-v2-home", root / "logs" / "pko-v2-manager.log"
        self.metrics_port = self.probe_port = 0
        self._process = Spawned("PKO v2's manager", self.log)

    def start(self) -> None:
        """Spawn it; returns once its ``/readyz`` answers 200."""
        self.metrics_port, self.probe_port = free_port(), free_port()
        files_port = free_port()
        argv = [
            str(self.built.manager),
            "--leader-elect=false",
            "--metrics-secure=false",
            f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{self.probe_port}",
            f"--program-fs-addr=127.0.0.1:{files_port}",
            f"--program-fs-adv-addr=127.0.0.1:{files_port}",
        ]
        self.home.mkdir(parents=True, exist_ok=True)
        self._process.spawn(argv, self.environment(), self.home)
        wait_for(self._ready, "PKO v2's /readyz", READY_TIMEOUT, detail=self.log_tail)

    def environment(self) -> dict[str, str]:
        """The manager's environment; see the module docstring."""
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "POD_NAMESPACE": SYSTEM_NAMESPACE,
            "POD_SA_NAME": MANAGER_ACCOUNT,
            "AGENT_IMAGE": IMAGE,
            "AGENT_IMAGE_PULL_POLICY": "Never",
            "HTTPS_PROXY": self.proxy_url,
            "NO_PROXY": f"{self.cluster.host_ip},127.0.0.1,localhost",
            "SSL_CERT_FILE": str(self.ca_file),
        }

    def stop(self) -> None:
        """See ``Spawned.stop``."""
        self._process.stop()

    @property
    def pid(self) -> int:
        """Its process id; raises ``RuntimeError`` with the log's tail once it exited."""
        return self._process.pid

    def requests(self) -> float:
        """API requests the manager has made so far (``rest_client_requests_total``, summed)."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
        return sum(
            sample.value
            for family in text_string_to_metric_families(text)
            if family.name == "rest_client_requests"
            for sample in family.samples
            if sample.name == "rest_client_requests_total"
        )

    def init_conflicts(self) -> int:
        """Workspace pods it deleted because marking them initialized conflicted (its log)."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text.count(INIT_CONFLICT)

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of its log."""
        return log_tail(self.log, lines)

    def _ready(self) -> bool:
        """``/readyz`` answers 200 (raises ``RuntimeError`` once the process exited)."""
        _ = self.pid
        try:
            url = f"http://127.0.0.1:{self.probe_port}/readyz"
            with urllib.request.urlopen(url, timeout=2) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False


def grant(cluster: NodeCluster, root: Path, namespaces: list[str]) -> None:
    """The manager's ServiceAccount and rights, and token reviews for each workspace's.

    ``namespaces`` are where the Stacks live (their workspaces run as ``default``).
    """
    manifest = root / "pko-v2-rbac.yaml"
    manifest.write_text("\n---\n".join([_MANAGER_RBAC, *map(_reviewer, namespaces)]))
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(manifest))


_MANAGER_RBAC = f"""\
apiVersion: v1
kind: Namespace
metadata: {{name: {SYSTEM_NAMESPACE}}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: {MANAGER_ACCOUNT}, namespace: {SYSTEM_NAMESPACE}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: pko-v2-workspace-rpc}}
rules:
- apiGroups: [auto.pulumi.com]
  resources: [workspaces/rpc]
  verbs: [use]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: pko-v2-workspace-rpc}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: pko-v2-workspace-rpc}}
subjects:
- {{kind: ServiceAccount, name: {MANAGER_ACCOUNT}, namespace: {SYSTEM_NAMESPACE}}}
"""


def _reviewer(namespace: str) -> str:
    """A binding letting ``namespace``'s ``default`` ServiceAccount review tokens."""
    return f"""\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: pko-v2-auth-delegator-{namespace}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:auth-delegator}}
subjects:
- {{kind: ServiceAccount, name: default, namespace: {namespace}}}
"""
