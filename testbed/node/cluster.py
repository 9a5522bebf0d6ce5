"""A real Kubernetes cluster of one node (or more), isolated on this machine, fully torn down.

``NodeCluster(root, binaries, nodes=1).start()``:

1. takes a network slot per node: a network namespace joined to the host by a veth pair,
   with host routes to its Pod range (and, through node 1, the Service range) through it
   (``testbed.node.network``); with more than one node, lets the host forward between the
   nodes' links and nowhere else (``testbed.node.forwarding``);
2. starts etcd + kube-apiserver listening on the host end of node 1's veth
   (``ControlPlane`` with ``NodeOptions``), then kube-controller-manager (service-account
   tokens, ``kube-root-ca.crt``, node lifecycle) and kube-scheduler on the host;
3. starts each node (``testbed.node.member``): its cgroup parent ``/pso-<id>[-i]`` and,
   inside its network namespace and a new mount + PID namespace, its supervisor, which
   runs containerd on a root planted with the sandbox (pause) image and the cluster's
   ``images`` (``testbed.node.image_store``: imported once per machine), then kubelet
   and kube-proxy;
4. returns when every Node has its Pod range as ``spec.podCIDR``, is Ready and has no
   ``not-ready`` taint left (the scheduler places pods on it) since the node lifecycle
   controller's passes saw it Ready (``SETTLED`` after its Ready transition: a pass that
   read the Node just before that adds the taint just after), every kube-proxy reports
   healthy, the ``kubernetes`` Service has its endpoint and the ``default``
   ServiceAccount exists.

Pod ranges: each node's CNI (host-local IPAM) hands out its own slot's ``/24``, so the
Node's ``spec.podCIDR`` must be that range. KCM's allocator cannot give it (it allocates
from one ``--cluster-cidr`` in its own order, and one slot's ``/24`` holds only one node),
so it allocates none (``--allocate-node-cidrs=false``) and the cluster sets each Node's
``spec.podCIDR`` from its slot once kubelet has registered it; one node or several, the
same way.

``stop()`` tears down in reverse: the supervisors (whose exit kills every process of
their node and drops its mounts), the control-plane processes, the forwarding, each
node's cgroups, network and files. It is safe to call after a failed ``start()`` and
twice. ``leftovers()`` lists what is still on the machine afterwards.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import secrets
import shutil
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

from kubernetes import client

from testbed.assets import find_built, find_kube_binary
from testbed.control_plane import Binaries, ControlPlane, NodeOptions
from testbed.node import config
from testbed.node.config import NodeLayout
from testbed.node.forwarding import NodeForwarding
from testbed.node.image_store import Archive
from testbed.node.member import NodeMember, mounts_of, processes_of
from testbed.node.network import NodeNetwork
from testbed.process import Process, ProcessError, free_port

READY_TIMEOUT = float(os.environ.get("PSO_NODE_READY_TIMEOUT", "180"))
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
_NOT_READY_TAINT = "node.kubernetes.io/not-ready"
# The node lifecycle controller's period (--node-monitor-period; 5 s by default, 1 s here so
# that a node's health is judged within a second), and how long a Node must have been Ready
# for its passes to have read it Ready: a pass that read it before writes its taint after.
NODE_MONITOR_PERIOD = 1
SETTLED = 3 * NODE_MONITOR_PERIOD
# How long a Node may go unheard before its controller marks it (and its pods) not Ready
# (--node-monitor-grace-period; 50 s by default). 15 s here, with the kubelets renewing their
# Lease every 2 s (``config.NODE_LEASE_SECONDS``): seven missed renewals, so a loaded machine
# does not flap a Node, while a test of a lost node waits 15 s for it, not production's 50.
NODE_MONITOR_GRACE = 15


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
    """Control plane + kube-controller-manager + kube-scheduler + ``nodes`` real nodes.

    The single-node properties (``node_name``, ``node_ip``, ``pod_cidr``, ``layout``,
    ``network``) are node 1's; ``members`` has every node.
    """

    def __init__(
        self,
        root: Path,
        binaries: NodeBinaries | None = None,
        nodes: int = 1,
        images: Sequence[Archive] = (),
    ) -> None:
        """Prepare (not start) a cluster of ``nodes`` nodes whose files all live under ``root``.

        Each node starts with ``images`` in its containerd (seeded: ``NodeMember.start``);
        ``load_image`` adds others later, and only checks those.

        Raises:
            ValueError: ``nodes`` is less than 1.
        """
        if nodes < 1:
            msg = f"a cluster needs a node, not {nodes}"
            raise ValueError(msg)
        self.root = root
        self.binaries = binaries or NodeBinaries.find()
        self.run_id = secrets.token_hex(3)
        self.logs = root / "logs"
        self.members = [NodeMember(self.run_id, i, root, self.logs) for i in range(1, nodes + 1)]
        self.images = tuple(images)
        self._forwarding = NodeForwarding(self.run_id) if nodes > 1 else None
        self._plane: ControlPlane | None = None
        self._host_processes: list[Process] = []
        self._host_health: dict[str, str] = {}  # host process name -> its /healthz URL
        self._host_defaults_before = {p for p in _HOST_DEFAULTS if p.exists()}

    # -- what tests use --------------------------------------------------------------

    @property
    def node_name(self) -> str:
        """Node 1's name (``pso-node-<id>``)."""
        return self.members[0].name

    @property
    def node_names(self) -> list[str]:
        """Every node's name, node 1 first."""
        return [member.name for member in self.members]

    @property
    def network(self) -> NodeNetwork:
        """Node 1's network (available once ``start()`` has begun)."""
        return self.members[0].network

    @property
    def control_plane(self) -> ControlPlane:
        """The cluster's etcd + kube-apiserver."""
        assert self._plane is not None, "start() first"
        return self._plane

    @property
    def host_ip(self) -> str:
        """The host end of node 1's veth: kube-apiserver, and host servers every pod reaches."""
        return self.network.host_ip

    @property
    def node_ip(self) -> str:
        """Node 1's InternalIP."""
        return self.network.node_ip

    @property
    def pod_cidr(self) -> str:
        """Node 1's Pod range, routed from the host."""
        return self.network.pod_cidr

    @property
    def service_cidr(self) -> str:
        """The Service ClusterIP range (node 1's slot), routed from the host through node 1."""
        return self.network.service_cidr

    @property
    def kubeconfig(self) -> Path:
        """An admin kubeconfig, usable from the host."""
        return self.control_plane.kubeconfig

    @property
    def processes(self) -> list[Process]:
        """The host-side processes: etcd, kube-apiserver, KCM, scheduler, the node supervisors."""
        plane = self._plane.processes if self._plane else []
        nodes = [m.supervisor for m in self.members if m.supervisor is not None]
        return [*plane, *self._host_processes, *nodes]

    @property
    def layout(self) -> NodeLayout:
        """Where node 1's daemons see their files (``testbed.node.faults`` uses it)."""
        return self.members[0].layout

    def log_files(self) -> list[Path]:
        """Every log of the cluster (host processes and every node's daemons)."""
        nodes = [log for member in self.members for log in member.log_files()]
        return sorted(self.logs.glob("*.log")) + nodes

    def kubectl(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl as admin (``ControlPlane.kubectl``)."""
        return self.control_plane.kubectl(*args, check=check, timeout=timeout)

    def api_client(self) -> client.ApiClient:
        """A new admin API client."""
        return self.control_plane.api_client()

    def load_image(self, archive: Path, ref: str) -> None:
        """Import an image archive (OCI or docker-archive) holding ``ref`` into every node.

        The nodes import side by side.

        Raises:
            ProcessError: ``ctr`` failed, or the archive did not give a node's containerd
                ``ref`` (pods naming it would only wait in ``ErrImageNeverPull``).
        """
        if len(self.members) == 1:
            self.members[0].load_image(archive, ref)
            return
        with ThreadPoolExecutor(len(self.members)) as pool:
            for done in [pool.submit(m.load_image, archive, ref) for m in self.members]:
                done.result()

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Start everything; returns when every node is Ready (``READY_TIMEOUT``).

        Raises:
            ProcessError: a component failed or a node was not ready in time (all that
                was started is stopped again).
        """
        try:
            for member in self.members:
                member.create_network()
            if self._forwarding is not None:
                self._forwarding.enable([m.network.host_link for m in self.members])
            self._start_control_plane()
            proxy_kubeconfig = self.control_plane.add_user("system:kube-proxy", [])
            for member in self.members:
                member.start(
                    self.control_plane, self.binaries.node_dir, proxy_kubeconfig, self.images
                )
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop and remove everything; safe after a failed start and twice."""
        for member in self.members:
            member.signal_stop()  # the nodes stop side by side
        for member in self.members:
            member.stop_supervisor()
        for proc in reversed(self._host_processes):
            proc.stop()
        if self._plane is not None:
            self._plane.stop()
        if self._forwarding is not None:
            self._forwarding.disable()
        for member in self.members:
            member.remove()

    def leftovers(self) -> list[str]:
        """What of this cluster is still on the machine: empty once ``stop()`` worked."""
        found = processes_of(self.root)
        found += [
            f"default path {p}"
            for p in _HOST_DEFAULTS
            if p.exists() and p not in self._host_defaults_before
        ]
        found += mounts_of(self.root)
        for member in self.members:
            found += member.leftovers()
        if self._forwarding is not None:
            found += self._forwarding.leftovers()
        return list(dict.fromkeys(found))

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
            # Each Node's podCIDR is its slot's range, set by _assign_pod_cidr.
            "--allocate-node-cidrs=false",
            f"--service-cluster-ip-range={self.service_cidr}",
            "--controllers=*",
            f"--node-monitor-period={NODE_MONITOR_PERIOD}s",
            f"--node-monitor-grace-period={NODE_MONITOR_GRACE}s",
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
        self._host_health[name] = f"https://127.0.0.1:{port}/healthz"
        proc.start(lambda: _https_status(self._host_health[name]) == 200)

    def restart_host_components(self) -> None:
        """Restart kube-controller-manager and kube-scheduler, as an outage does in a cluster.

        Both run here with ``--leader-elect=false``; in a cluster each holds a lease, loses
        it when the API server is gone longer than its renew deadline (10 s), exits, and is
        started again by its supervisor. Tests of an outage call this once the API server
        is back, so that the controllers start from a fresh list as they would there, and
        do not depend on how a long-lived informer rides out the outage (after one, the
        service account controller was once seen not to serve a new namespace for a minute).
        """
        for proc in self._host_processes:
            url = self._host_health[proc.name]
            proc.stop()
            proc.start(lambda url=url: _https_status(url) == 200)  # type: ignore[misc]

    def _wait_until_ready(self) -> None:
        with self.api_client() as api:
            deadline = time.monotonic() + READY_TIMEOUT
            for what, check in self._readiness(api):
                self._wait_for(what, check, deadline)

    def _readiness(self, api: client.ApiClient) -> list[tuple[str, Callable[[], bool]]]:
        """What ``start()`` waits for, in order (the nodes come up side by side)."""
        each: list[tuple[str, Callable[[client.ApiClient, NodeMember], bool]]] = [
            ("with its podCIDR", _assign_pod_cidr),
            ("Ready", _node_ready),
            ("with kube-proxy healthy", _proxy_healthy),
            (f"without the {_NOT_READY_TAINT} taint", _untainted),
        ]
        checks: list[tuple[str, Callable[[], bool]]] = [
            (f"Node {m.name} {what}", functools.partial(probe, api, m))
            for what, probe in each
            for m in self.members
        ]
        return [
            *checks,
            ("kubernetes Service endpoint", lambda: _api_endpoint(api, self.host_ip)),
            ("default ServiceAccount", lambda: _default_service_account(api)),
        ]

    def _wait_for(self, what: str, check: Callable[[], bool], deadline: float) -> None:
        why = f"not within {READY_TIMEOUT:.0f}s"
        while time.monotonic() < deadline:
            stopped = [m.name for m in self.members if not m.running()]
            if stopped:
                why = f"{', '.join(stopped)}: the node's supervisor exited"
                break
            with contextlib.suppress(OSError, client.ApiException):
                if check():
                    return
            time.sleep(0.2)
        logs = "\n".join(f"--- {p}\n{_tail(p)}" for p in self.log_files())
        msg = f"the node cluster never had: {what} ({why})\n{logs}"
        raise ProcessError(msg)


def _assign_pod_cidr(api: client.ApiClient, member: NodeMember) -> bool:
    """Give the registered Node its Pod range, once; whether it has it."""
    core, cidr = client.CoreV1Api(api), member.pod_cidr
    node = core.read_node(member.name)
    if node.spec is None or not node.spec.pod_cidr:
        node = core.patch_node(member.name, {"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}})
    return node.spec is not None and node.spec.pod_cidr == cidr


def _node_ready(api: client.ApiClient, member: NodeMember) -> bool:
    node = client.CoreV1Api(api).read_node(member.name)
    conditions = node.status.conditions if node.status else None
    return any(c.type == "Ready" and c.status == "True" for c in conditions or [])


def _proxy_healthy(_api: client.ApiClient, member: NodeMember) -> bool:
    url = f"http://{member.node_ip}:10256/healthz"
    with urllib.request.urlopen(url, timeout=2) as response:
        return int(response.status) == 200


def _untainted(api: client.ApiClient, member: NodeMember) -> bool:
    """Whether the Node is free of the not-ready taint, Ready long enough to stay so.

    Ready for ``SETTLED`` seconds: the node lifecycle controller's passes since read it
    Ready, so no taint from a pass that read it earlier is still to come.
    """
    node = client.CoreV1Api(api).read_node(member.name)
    taints = (node.spec.taints if node.spec else None) or []
    if any(t.key == _NOT_READY_TAINT for t in taints):
        return False
    conditions = (node.status.conditions if node.status else None) or []
    since = next((c.last_transition_time for c in conditions if c.type == "Ready"), None)
    if since is None:
        return False
    return (datetime.now(UTC) - since).total_seconds() >= SETTLED


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


def _tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
