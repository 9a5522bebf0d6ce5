"""A real Kubernetes control plane on loopback: etcd + kube-apiserver, as envtest starts it.

``ControlPlane.start()`` writes certificates, starts etcd (``--unsafe-no-fsync``), then
kube-apiserver with RBAC, client-certificate authentication and
``--advertise-address=127.0.0.1`` (without it the apiserver looks for a default route),
waits for ``/readyz`` and the ``default`` namespace, and writes a kubeconfig for an admin
user in ``system:masters``. No controller-manager or scheduler runs: namespaces never
finish deleting and nothing is garbage-collected (as in envtest).

Fault injection for tests: ``restart_apiserver()`` kills and restarts kube-apiserver on
the same port (``stop_apiserver()`` and ``start_apiserver()`` are its two halves, for an
outage of a length the test decides), and ``compact_etcd()`` compacts etcd's history so
that watches from an older resourceVersion get ``410 Gone``.

With ``NodeOptions`` (what ``testbed.node`` passes) kube-apiserver is set up for a real
node instead: it binds and advertises an address the node's network namespace reaches,
its serving certificate also names the ``kubernetes`` Service (ClusterIP and DNS names),
the Node and RBAC authorizers, ServiceAccount and NodeRestriction admission and the
endpoint reconciler are on, and it holds a client certificate for calling kubelets.
"""

from __future__ import annotations

import base64
import dataclasses
import ipaddress
import json
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import yaml
from kubernetes import client, config

from testbed.certs import TinyCA
from testbed.process import START_TIMEOUT, Process, ProcessError, free_port
from testbed.waits import wait_for

HOST = "127.0.0.1"
_SERVICE_NAMES = (
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


@dataclasses.dataclass(frozen=True)
class Binaries:
    """Paths of the control-plane binaries."""

    etcd: Path
    kube_apiserver: Path
    kubectl: Path


@dataclasses.dataclass(frozen=True)
class NodeOptions:
    """kube-apiserver settings for a control plane that real nodes join."""

    address: str  # bound and advertised: must be reachable from the nodes (not 0.0.0.0)
    service_cidr: str  # the Service ClusterIP range

    @property
    def kubernetes_service_ip(self) -> str:
        """The ``kubernetes`` Service's ClusterIP: the range's first address."""
        return str(ipaddress.ip_network(self.service_cidr)[1])


class ControlPlane:
    """etcd + kube-apiserver in a directory of their own."""

    def __init__(self, binaries: Binaries, root: Path, node: NodeOptions | None = None) -> None:
        """Prepare (not start) a control plane whose files live under ``root``.

        Without ``node`` the apiserver serves on loopback only, as envtest's does.
        """
        self.binaries = binaries
        self.root = root
        self.node = node
        self.host = node.address if node else HOST
        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.port = free_port()
        self.kubeconfig = root / "kubeconfig"
        self.certs = root / "certs"  # serving-ca.crt, client-ca.crt, sa-signer.{crt,key}
        self._client_ca: TinyCA | None = None
        self._etcd: Process | None = None
        self._apiserver: Process | None = None

    @property
    def url(self) -> str:
        """The apiserver's https URL."""
        return f"https://{self.host}:{self.port}"

    @property
    def processes(self) -> list[Process]:
        """The running component processes (for log collection)."""
        return [p for p in (self._etcd, self._apiserver) if p is not None]

    def start(self) -> None:
        """Start etcd and kube-apiserver and wait until the API serves requests."""
        self._write_certs()
        self._start_etcd()
        self._start_apiserver()
        admin = self.certs / "admin.crt", self.certs / "admin.key"
        self._write_kubeconfig(self.kubeconfig, admin[0].read_bytes(), admin[1].read_bytes())
        self._wait_for_default_namespace()

    def stop(self) -> None:
        """Stop kube-apiserver, then etcd."""
        # kube-apiserver's graceful shutdown waits on in-flight watches for up to a minute;
        # its state lives in etcd's throw-away directory, so a short grace is enough.
        if self._apiserver is not None:
            self._apiserver.stop(timeout=3)
        if self._etcd is not None:
            self._etcd.stop()

    def restart_apiserver(self, down_for: float = 0.0) -> None:
        """Kill kube-apiserver (SIGKILL), wait ``down_for`` seconds, start it again."""
        self.stop_apiserver()
        time.sleep(down_for)
        self.start_apiserver()

    def stop_apiserver(self) -> None:
        """Kill kube-apiserver (SIGKILL), as a crash would; etcd keeps running."""
        assert self._apiserver is not None, "the apiserver is not running"
        self._apiserver.kill()

    def start_apiserver(self) -> None:
        """Start kube-apiserver again on the same port; returns once ``/readyz`` says ok."""
        self._start_apiserver()

    def compact_etcd(self) -> int:
        """Compact etcd up to its current revision; returns that revision.

        Watches and lists from any earlier resourceVersion then fail with 410 Gone,
        once the apiserver's watch cache no longer holds them.
        """
        base = f"http://{HOST}:{self.etcd_port}/v3"
        status = _post_json(f"{base}/kv/range", {"key": "AA=="})  # any key: we want the header
        revision = int(status["header"]["revision"])
        _post_json(f"{base}/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def api_client(self, kubeconfig: Path | None = None) -> client.ApiClient:
        """A new API client (its own connection pool), admin unless ``kubeconfig`` is given."""
        api: client.ApiClient = config.new_client_from_config(
            config_file=str(kubeconfig or self.kubeconfig)
        )
        return api

    def add_user(self, name: str, groups: list[str]) -> Path:
        """Issue a client certificate for ``name`` in ``groups``; returns its kubeconfig."""
        assert self._client_ca is not None, "start() first"
        pair = self._client_ca.client_cert(name, groups)
        path = self.root / f"kubeconfig-{name}"
        self._write_kubeconfig(path, pair.cert_pem, pair.key_pem)
        return path

    def kubectl(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this control plane; ``timeout`` bounds the process (seconds).

        A command that waits (``rollout status``, ``wait``) needs ``timeout`` longer than
        its own ``--timeout``, or its answer is cut off before kubectl gives it.
        """
        return subprocess.run(
            [str(self.binaries.kubectl), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
        )

    # -- internals ------------------------------------------------------------------

    def _write_certs(self) -> None:
        self.certs.mkdir(parents=True, exist_ok=True)
        serving_ca = TinyCA("serving-ca")
        client_ca = self._client_ca = TinyCA("client-ca")
        signer = TinyCA("service-account-signer")
        extra_ips = [HOST, self.node.kubernetes_service_ip] if self.node else []
        serving = serving_ca.serving_cert(self.host, extra_ips, _SERVICE_NAMES if self.node else ())
        admin = client_ca.client_cert("admin", ["system:masters"])
        # apiserver -> kubelet (logs, exec): kubelets authenticate it with the client CA.
        kubelet_client = client_ca.client_cert("kube-apiserver-kubelet-client", ["system:masters"])
        files = {
            "serving-ca.crt": serving_ca.cert_pem,
            "apiserver.crt": serving.cert_pem,
            "apiserver.key": serving.key_pem,
            "client-ca.crt": client_ca.cert_pem,
            "admin.crt": admin.cert_pem,
            "admin.key": admin.key_pem,
            "sa-signer.crt": signer.key_pair.cert_pem,
            "sa-signer.key": signer.key_pair.key_pem,
            "kubelet-client.crt": kubelet_client.cert_pem,
            "kubelet-client.key": kubelet_client.key_pem,
        }
        for name, data in files.items():
            path = self.certs / name
            path.write_bytes(data)
            path.chmod(0o600)

    def _start_etcd(self) -> None:
        data = self.root / "etcd-data"
        client_url = f"http://{HOST}:{self.etcd_port}"
        peer_url = f"http://{HOST}:{self.etcd_peer_port}"
        argv = [
            str(self.binaries.etcd),
            "--name=test",
            f"--data-dir={data}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=test={peer_url}",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]
        self._etcd = Process("etcd", argv, self.root / "logs")
        self._etcd.start(lambda: _get(f"{client_url}/health") == 200)

    def _start_apiserver(self) -> None:
        certs = self.certs
        argv = [
            str(self.binaries.kube_apiserver),
            f"--etcd-servers=http://{HOST}:{self.etcd_port}",
            f"--cert-dir={certs}",
            f"--tls-cert-file={certs / 'apiserver.crt'}",
            f"--tls-private-key-file={certs / 'apiserver.key'}",
            f"--secure-port={self.port}",
            f"--bind-address={self.host}",
            f"--advertise-address={self.host}",
            "--allow-privileged=true",
            *(self._node_flags() if self.node else _LOOPBACK_FLAGS),
            f"--service-account-issuer=https://{self.host}:{self.port}/",
            f"--service-account-key-file={certs / 'sa-signer.crt'}",
            f"--service-account-signing-key-file={certs / 'sa-signer.key'}",
            f"--client-ca-file={certs / 'client-ca.crt'}",
            "--v=1",
        ]
        context = ssl.create_default_context(cafile=str(certs / "serving-ca.crt"))
        self._apiserver = Process("kube-apiserver", argv, self.root / "logs")
        self._apiserver.start(lambda: _get(f"{self.url}/readyz", context) == 200)

    def _node_flags(self) -> list[str]:
        assert self.node is not None
        certs = self.certs
        return [
            f"--service-cluster-ip-range={self.node.service_cidr}",
            "--enable-admission-plugins=NodeRestriction",
            "--authorization-mode=Node,RBAC",
            f"--kubelet-client-certificate={certs / 'kubelet-client.crt'}",
            f"--kubelet-client-key={certs / 'kubelet-client.key'}",
            "--kubelet-preferred-address-types=InternalIP",
        ]

    def _write_kubeconfig(self, path: Path, cert_pem: bytes, key_pem: bytes) -> None:
        def b64(data: bytes) -> str:
            return base64.b64encode(data).decode()

        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "envtest",
                    "cluster": {
                        "server": self.url,
                        "certificate-authority-data": b64(
                            (self.certs / "serving-ca.crt").read_bytes()
                        ),
                    },
                }
            ],
            "users": [
                {
                    "name": "envtest",
                    "user": {
                        "client-certificate-data": b64(cert_pem),
                        "client-key-data": b64(key_pem),
                    },
                }
            ],
            "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": "envtest"}}],
            "current-context": "envtest",
        }
        path.write_text(yaml.safe_dump(kubeconfig))
        path.chmod(0o600)

    def _wait_for_default_namespace(self) -> None:
        # The system-namespaces controller inside the apiserver creates "default"
        # asynchronously after /readyz turns green.
        core = client.CoreV1Api(self.api_client())
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            try:
                core.read_namespace("default")
            except client.ApiException as err:
                if err.status != 404:
                    raise
                time.sleep(0.1)
            else:
                return
        msg = "the default namespace never appeared"
        raise ProcessError(msg)


_LOOPBACK_FLAGS = (
    "--service-cluster-ip-range=10.0.0.0/24",
    # The kubernetes Service may not point at loopback; nothing here needs it.
    "--endpoint-reconciler-type=none",
    "--disable-admission-plugins=ServiceAccount",
    "--authorization-mode=RBAC",
)


def _get(url: str, context: ssl.SSLContext | None = None) -> int:
    with urllib.request.urlopen(url, timeout=2, context=context) as response:  # noqa: S310 - our URL
        return int(response.status)


def _post_json(url: str, body: dict[str, object]) -> dict[str, dict[str, str]]:
    request = urllib.request.Request(  # noqa: S310 - our loopback etcd
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
        result: dict[str, dict[str, str]] = json.load(response)
        return result


Kubectl = Callable[..., "subprocess.CompletedProcess[str]"]


def wait_established(kubectl: Kubectl, crd: str, timeout: float = 60) -> None:
    """Wait until the CRD ``crd`` is Established, through ``kubectl(*args, check=False)``.

    Polls the condition itself: ``kubectl wait --for=condition=Established`` fails at once
    ("accessor error") when it reads the CRD before the API server has written any
    condition, which happens on a busy machine.
    """
    path = '{.status.conditions[?(@.type=="Established")].status}'

    def established() -> bool:
        found = kubectl("get", f"crd/{crd}", "-o", f"jsonpath={path}", check=False)
        return found.returncode == 0 and found.stdout.strip() == "True"

    wait_for(established, f"the CRD {crd} to be Established", timeout)
