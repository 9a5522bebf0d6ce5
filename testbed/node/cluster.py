"""A real single-node Kubernetes cluster, isolated on this machine and fully torn down.

``NodeCluster.start()``:

1. takes a network slot: a network namespace joined to the host by a veth pair, with host
   routes to the Pod and Service ranges through it (``testbed.node.network``);
2. starts etcd + kube-apiserver listening on the host end of the veth (``ControlPlane``
   with ``NodeOptions``), then kube-controller-manager (node CIDRs, service-account
   tokens, ``kube-root-ca.crt``) and kube-scheduler on the host;
3. creates the cgroup parent ``/pso-<id>`` (``testbed.node.cgroups``) and starts, inside
   the network namespace and a new mount + PID namespace, the supervisor
   (``testbed/node/supervisor.py``) which runs containerd, then -- once the sandbox (pause)
   image, packed by ``testbed.node.oci``, is imported -- kubelet and kube-proxy;
4. returns when the Node is Ready, the ``kubernetes`` Service has its endpoint, the
   ``default`` ServiceAccount exists and kube-proxy reports healthy.

``stop()`` tears down in reverse: the supervisor (whose exit kills every process of the
node and drops its mounts), the control-plane processes, the cgroups, the network. It is
safe to call after a failed ``start()`` and twice. ``leftovers()`` lists what is still on
the machine afterwards.

The node's files live in ``/tmp/pso-<id>`` (``root/node`` is a symlink to it), since unix
socket paths (containerd's, kubelet's) may not exceed ~100 bytes and pytest's temporary
directories are long. The daemons get the real, short paths: a kubelet that saw its
volumes through a symlink would, once restarted, mount them again and never tear them
down. ``stop()`` removes the directory once no mount is left under it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from kubernetes import client

from testbed.assets import find_built, find_kube_binary
from testbed.control_plane import Binaries, ControlPlane, NodeOptions
from testbed.node import config
from testbed.node.cgroups import CgroupParent
from testbed.node.config import NodeLayout
from testbed.node.network import NodeNetwork
from testbed.node.oci import make_oci_archive
from testbed.process import Process, ProcessError, free_port

READY_TIMEOUT = float(os.environ.get("PSO_NODE_READY_TIMEOUT", "180"))
_SUPERVISOR = Path(__file__).with_name("supervisor.py")
# What must be installed on the host (hack/install-node installs it).
HOST_TOOLS = (
    "containerd",
    "containerd-shim-runc-v2",
    "runc",
    "ctr",
    "ip",
    "nsenter",
    "unshare",
    "mount",
    "iptables",
    "iptables-restore",
    "iptables-save",
)
# Where kubelet and KCM write by default: every one is configured away, and
# ``leftovers()`` reports any that appears while the cluster runs.
_HOST_DEFAULTS = tuple(
    Path(p)
    for p in (
        "/var/lib/kubelet",
        "/var/log/pods",
        "/var/log/containers",
        "/usr/libexec/kubernetes",
        "/etc/kubernetes",
    )
)
CNI_PLUGINS = ("bridge", "host-local", "portmap", "loopback")


def missing_host_tools() -> list[str]:
    """Programs and CNI plugins the node needs that this machine lacks."""
    missing = [tool for tool in HOST_TOOLS if shutil.which(tool) is None]
    cni = config.CNI_BIN_DIR
    missing += [str(cni / p) for p in CNI_PLUGINS if not (cni / p).is_file()]
    return missing


@dataclasses.dataclass(frozen=True)
class NodeBinaries:
    """The Kubernetes binaries a node cluster runs (containerd and runc come from the host)."""

    control_plane: Binaries
    node_dir: Path  # kubelet, kube-proxy, kube-controller-manager, kube-scheduler, pause

    @classmethod
    def find(cls, *, build: bool = True) -> NodeBinaries:
        """Find (or build) them with ``testbed.assets``."""
        names = ("etcd", "kube-apiserver", "kubectl")
        plane = Binaries(*(find_kube_binary(n, build=build) for n in names))
        return cls(plane, find_built("node", build=build))


class NodeCluster:
    """Control plane + kube-controller-manager + kube-scheduler + one real node."""

    def __init__(self, root: Path, binaries: NodeBinaries | None = None) -> None:
        """Prepare (not start) a cluster whose files all live under ``root``."""
        self.root = root
        self.binaries = binaries or NodeBinaries.find()
        self.run_id = secrets.token_hex(3)
        self.node_name = f"pso-node-{self.run_id}"
        self.logs = root / "logs"
        # Unix socket paths are limited to ~100 bytes: the node's files live here (short),
        # and root/node links to them.
        self._short_root = Path(tempfile.gettempdir()) / f"pso-{self.run_id}"
        self._cgroups = CgroupParent(f"pso-{self.run_id}")
        self._network: NodeNetwork | None = None
        self._plane: ControlPlane | None = None
        self._host_processes: list[Process] = []
        self._host_defaults_before = {p for p in _HOST_DEFAULTS if p.exists()}
        self._supervisor: Process | None = None

    # -- what tests use --------------------------------------------------------------

    @property
    def network(self) -> NodeNetwork:
        """The node's network (available once ``start()`` has begun)."""
        assert self._network is not None, "start() first"
        return self._network

    @property
    def control_plane(self) -> ControlPlane:
        """The cluster's etcd + kube-apiserver."""
        assert self._plane is not None, "start() first"
        return self._plane

    @property
    def host_ip(self) -> str:
        """The host end of the veth: pods reach servers bound here (and the apiserver)."""
        return self.network.host_ip

    @property
    def node_ip(self) -> str:
        """The node's InternalIP."""
        return self.network.node_ip

    @property
    def pod_cidr(self) -> str:
        """The Pod range, routed from the host."""
        return self.network.pod_cidr

    @property
    def service_cidr(self) -> str:
        """The Service ClusterIP range, routed from the host (through kube-proxy)."""
        return self.network.service_cidr

    @property
    def kubeconfig(self) -> Path:
        """An admin kubeconfig, usable from the host."""
        return self.control_plane.kubeconfig

    @property
    def processes(self) -> list[Process]:
        """The host-side processes: etcd, kube-apiserver, KCM, scheduler, the node supervisor."""
        plane = self._plane.processes if self._plane else []
        node = [self._supervisor] if self._supervisor else []
        return [*plane, *self._host_processes, *node]

    @property
    def layout(self) -> NodeLayout:
        """Where the node's daemons see their files (``testbed.node.faults`` uses it)."""
        return self._layout()

    def log_files(self) -> list[Path]:
        """Every log of the cluster (host processes and the node's daemons)."""
        return sorted(self.logs.glob("*.log")) + sorted((self.root / "node" / "logs").glob("*.log"))

    def kubectl(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl as admin (``ControlPlane.kubectl``)."""
        return self.control_plane.kubectl(*args, check=check, timeout=timeout)

    def api_client(self) -> client.ApiClient:
        """A new admin API client."""
        return self.control_plane.api_client()

    def load_image(self, archive: Path, ref: str) -> None:
        """Import an image archive (OCI or docker-archive) that holds ``ref`` into containerd.

        Raises:
            ProcessError: ``ctr`` failed, or the archive did not give containerd ``ref``
                (pods naming it would only wait in ``ErrImageNeverPull``).
        """
        self._ctr("images", "import", str(archive))
        listed = self._ctr("images", "ls", "--quiet").split()
        if ref not in listed:
            msg = f"{archive} did not give containerd the image {ref} (it has: {listed})"
            raise ProcessError(msg)

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Start everything; returns when the node is Ready (``READY_TIMEOUT``).

        Raises:
            ProcessError: a component failed or the node was not ready in time (all that
                was started is stopped again).
        """
        try:
            self._network = NodeNetwork.create(self.run_id)
            self._start_control_plane()
            self._cgroups.create()
            self._start_node()
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop and remove everything; safe after a failed start and twice."""
        if self._supervisor is not None:
            self._stop_supervisor(self._supervisor)
        for proc in reversed(self._host_processes):
            proc.stop()
        if self._plane is not None:
            self._plane.stop()
        self._cgroups.remove()
        if self._network is not None:
            self._network.delete()
        self._remove_files()

    def _remove_files(self) -> None:
        """The node's directory and its symlink; kept (a leftover) while a mount is in it."""
        if self._short_root.is_dir() and not _mounts_of(str(self._short_root)):
            shutil.rmtree(self._short_root, ignore_errors=True)
        node = self.root / "node"
        if node.is_symlink():
            node.unlink()

    def leftovers(self) -> list[str]:
        """What of this cluster is still on the machine: empty once ``stop()`` worked."""
        found = _processes_of(str(self.root)) + _processes_of(str(self._short_root))
        found += [
            f"default path {p}"
            for p in _HOST_DEFAULTS
            if p.exists() and p not in self._host_defaults_before
        ]
        if self._short_root.exists():
            found.append(f"directory {self._short_root}")
        found += _mounts_of(str(self.root)) + _mounts_of(str(self._short_root))
        found += self._cgroups.leftovers()
        if self._network is not None:
            found += self._network.leftovers()
            found += _host_iptables_mentions(self._network.pod_cidr.split("/", 1)[0])
        return found

    # -- internals ---------------------------------------------------------------------

    def _start_control_plane(self) -> None:
        options = NodeOptions(address=self.host_ip, service_cidr=self.service_cidr)
        plane = self._plane = ControlPlane(
            self.binaries.control_plane, self.root / "control-plane", options
        )
        plane.start()
        self._start_host_component("kube-controller-manager", self._kcm_flags())
        self._start_host_component("kube-scheduler", [])

    def _kcm_flags(self) -> list[str]:
        certs = self.control_plane.certs
        return [
            f"--service-account-private-key-file={certs / 'sa-signer.key'}",
            f"--root-ca-file={certs / 'serving-ca.crt'}",
            "--use-service-account-credentials=true",
            "--allocate-node-cidrs=true",
            f"--cluster-cidr={self.pod_cidr}",
            "--node-cidr-mask-size=24",
            f"--service-cluster-ip-range={self.service_cidr}",
            "--controllers=*",
            # Its default is under /usr/libexec, which it would create on the host.
            f"--flex-volume-plugin-dir={self.root / 'kcm-flex-volumes'}",
        ]

    def _start_host_component(self, name: str, flags: list[str]) -> None:
        user = f"system:{name}"
        kubeconfig = self.control_plane.add_user(user, [])
        port = free_port()
        argv = [
            str(self.binaries.node_dir / name),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            "--leader-elect=false",
            f"--cert-dir={self.root / name}",
            "--v=1",
            *flags,
        ]
        proc = Process(name, argv, self.logs)
        self._host_processes.append(proc)
        proc.start(lambda: _https_status(f"https://127.0.0.1:{port}/healthz") == 200)

    def _layout(self) -> NodeLayout:
        return NodeLayout(
            root=self._short_root,
            node_name=self.node_name,
            node_ip=self.node_ip,
            pod_cidr=self.pod_cidr,
            cgroup_root=self._cgroups.path,
        )

    def _start_node(self) -> None:
        self._short_root.mkdir(parents=True)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "node").symlink_to(self._short_root)
        layout = self._layout()
        spec = self._write_node_files(layout)
        argv = [
            "nsenter",
            f"--net={self.network.netns_path}",
            "--",
            "unshare",
            "--mount",
            "--pid",
            "--fork",
            "--mount-proc",
            "--propagation=private",
            "--kill-child=SIGTERM",
            sys.executable,
            str(_SUPERVISOR),
            str(spec),
        ]
        self._supervisor = Process("node-supervisor", argv, self.logs)
        socket = layout.containerd_socket
        self._supervisor.start(socket.exists)
        pause = make_oci_archive(
            layout.path("images/pause.tar"),
            config.SANDBOX_IMAGE,
            {"pause": self.binaries.node_dir / "pause"},
            ["/pause"],
        )
        self.load_image(pause, config.SANDBOX_IMAGE)
        layout.path("go").touch()  # the supervisor starts kubelet and kube-proxy now

    def _write_node_files(self, layout: NodeLayout) -> Path:
        plane = self.control_plane
        for name in ("containerd", "cni", "cni-ipam", "pod-logs", "kubelet", "logs", "images"):
            layout.path(name).mkdir(parents=True, exist_ok=True)
        kubelet_kubeconfig = plane.add_user(f"system:node:{self.node_name}", ["system:nodes"])
        proxy_kubeconfig = plane.add_user("system:kube-proxy", [])
        files = {
            "containerd/config.toml": config.containerd_toml(layout),
            "cni/10-testbed.conflist": config.cni_conflist(layout),
            "kubelet/config.yaml": config.kubelet_config(layout, plane.certs / "client-ca.crt"),
            "kube-proxy.yaml": config.kube_proxy_config(layout, proxy_kubeconfig),
            config.RESOLV_CONF: config.RESOLV_CONF_TEXT,
        }
        for name, text in files.items():
            layout.path(name).write_text(text)
        bins = self.binaries.node_dir
        kubelet = [
            str(bins / "kubelet"),
            f"--config={layout.path('kubelet/config.yaml')}",
            f"--kubeconfig={kubelet_kubeconfig}",
            f"--root-dir={layout.path('kubelet')}",
            f"--hostname-override={self.node_name}",
            f"--node-ip={self.node_ip}",
            "--v=2",
        ]
        proxy = [str(bins / "kube-proxy"), f"--config={layout.path('kube-proxy.yaml')}", "--v=2"]
        containerd = ["containerd", f"--config={layout.path('containerd/config.toml')}"]
        go = str(layout.path("go"))
        components = [
            {"name": "containerd", "argv": containerd, "ready": str(layout.containerd_socket)},
            {"name": "kubelet", "argv": kubelet, "after": go},
            {"name": "kube-proxy", "argv": proxy, "after": go},
        ]
        for component in components:
            component["log"] = str(layout.path(f"logs/{component['name']}.log"))
        spec = {
            "tmpfs": ["/run", "/var/log", "/var/lib"],
            "components": components,
            "stop_timeout": 10,
            "control": str(layout.path("control")),  # testbed.node.faults
        }
        path = layout.path("supervisor.json")
        path.write_text(json.dumps(spec, indent=2))
        return path

    def _stop_supervisor(self, supervisor: Process) -> None:
        # unshare blocks SIGTERM while it waits: signal its group, which holds the
        # supervisor (PID 1 inside); Process.stop then waits, and kills if it must.
        if supervisor.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(supervisor.pid, signal.SIGTERM)
        supervisor.stop(timeout=60)
        self._supervisor = None

    def _ctr(self, *args: str) -> str:
        argv = ["ctr", "--address", str(self._layout().containerd_socket), "-n", "k8s.io", *args]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
        if proc.returncode != 0:
            msg = f"ctr {' '.join(args)} failed: {proc.stderr.strip()}"
            raise ProcessError(msg)
        return proc.stdout

    def _wait_until_ready(self) -> None:
        with self.api_client() as api:
            checks: list[tuple[str, Callable[[], bool]]] = [
                (f"Node {self.node_name} Ready", lambda: _node_ready(api, self.node_name)),
                ("kubernetes Service endpoint", lambda: _api_endpoint(api, self.host_ip)),
                ("default ServiceAccount", lambda: _default_service_account(api)),
                (
                    "kube-proxy healthy",
                    lambda: _http_status(f"http://{self.node_ip}:10256/healthz") == 200,
                ),
            ]
            deadline = time.monotonic() + READY_TIMEOUT
            for what, check in checks:
                self._wait_for(what, check, deadline)

    def _wait_for(self, what: str, check: Callable[[], bool], deadline: float) -> None:
        why = f"not within {READY_TIMEOUT:.0f}s"
        while time.monotonic() < deadline:
            if self._supervisor is None or not _running(self._supervisor.pid):
                why = "the node's supervisor exited"
                break
            with contextlib.suppress(OSError, client.ApiException):
                if check():
                    return
            time.sleep(0.2)
        logs = "\n".join(f"--- {p}\n{_tail(p)}" for p in self.log_files())
        msg = f"the node cluster never had: {what} ({why})\n{logs}"
        raise ProcessError(msg)


def _node_ready(api: client.ApiClient, name: str) -> bool:
    node = client.CoreV1Api(api).read_node(name)
    conditions = node.status.conditions if node.status else None
    return any(c.type == "Ready" and c.status == "True" for c in conditions or [])


def _api_endpoint(api: client.ApiClient, address: str) -> bool:
    slices = client.DiscoveryV1Api(api).list_namespaced_endpoint_slice(
        "default", label_selector="kubernetes.io/service-name=kubernetes"
    )
    return any(address in (e.addresses or []) for s in slices.items for e in s.endpoints or [])


def _default_service_account(api: client.ApiClient) -> bool:
    client.CoreV1Api(api).read_namespaced_service_account("default", "default")
    return True


def _https_status(url: str) -> int:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # a component's self-signed serving certificate
    with urllib.request.urlopen(url, timeout=2, context=context) as response:  # noqa: S310
        return int(response.status)


def _http_status(url: str) -> int:
    with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - our node's URL
        return int(response.status)


def _running(pid: int | None) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return pid is not None and stat.rsplit(")", 1)[1].split()[0] != "Z"


def _tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _processes_of(marker: str) -> list[str]:
    """Processes whose command line names ``marker`` (every daemon and shim of the node)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if marker in cmdline:
                found.append(f"process {proc.name}: {cmdline.strip()[:200]}")
    return found


def _mounts_of(marker: str) -> list[str]:
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [f"mount {line.split()[4]}" for line in lines if marker in line]


def _host_iptables_mentions(pod_network: str) -> list[str]:
    """Host iptables rules that mention the Pod range (kube-proxy's belong in the netns)."""
    if shutil.which("iptables-save") is None:
        return []
    dump = subprocess.run(["iptables-save"], capture_output=True, text=True, check=False).stdout
    return [f"iptables rule {line}" for line in dump.splitlines() if pod_network in line]
