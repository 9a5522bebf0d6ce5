"""One node of a ``NodeCluster``: its network, cgroup parent, files and supervisor.

A ``NodeMember`` is everything of one node that is not the control plane's:

- its network (``testbed.node.network``): a slot of its own, a network namespace, a veth
  pair, its Pod range routed from the host;
- its cgroup parent (``testbed.node.cgroups``), kubelet's ``cgroupRoot``;
- its files, in a short directory under ``/tmp`` (unix socket paths may not exceed ~100
  bytes; the cluster's root links to it), which the daemons see by their real path: a
  kubelet that saw its volumes through a symlink would, once restarted, mount them again
  and never tear them down;
- its supervisor (``testbed/node/supervisor.py``), PID 1 of a new mount + PID namespace
  inside the network namespace, which runs containerd, then -- once the host has checked
  the sandbox (pause) image is in -- kubelet and kube-proxy;
- its containerd root, planted from a seed (``testbed.node.image_store``) holding the
  pause image and the images ``start`` is given, so a node imports none of them.

Node 1 has the names a single-node cluster always had: Node ``pso-node-<id>``, network
namespace ``pso-<id>``, cgroup ``/pso-<id>``, files in ``/tmp/pso-<id>`` linked from
``<root>/node``, log ``node-supervisor.log``. Node ``i`` > 1 adds ``-<i>`` to each
(``pso-node-<id>-2``, ``<root>/node-2``, ``node-supervisor-2.log``).

Lifecycle: ``create_network()``; ``start(...)`` (returns once containerd runs, the pause
image is in, and kubelet and kube-proxy are told to start); ``signal_stop()`` then
``stop_supervisor()`` (the supervisor's exit kills every process of the node and drops
its mounts); ``remove()`` (cgroups, network, files: safe after a failed start and
twice). ``leftovers()`` lists what of the node is still on the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from testbed.control_plane import ControlPlane
from testbed.node import config, image_store
from testbed.node.cgroups import CgroupParent
from testbed.node.config import NodeLayout
from testbed.node.image_store import Archive, Seed
from testbed.node.network import NodeNetwork
from testbed.node.oci import make_oci_archive
from testbed.process import Process, ProcessError

_SUPERVISOR = Path(__file__).with_name("supervisor.py")


class NodeMember:
    """Node ``index`` of cluster ``run_id`` (module docstring)."""

    def __init__(self, run_id: str, index: int, root: Path, logs: Path) -> None:
        """Prepare (not start) the node; ``root`` is the cluster's, ``logs`` its log directory."""
        suffix = f"-{index}" if index > 1 else ""
        self.run_id = run_id
        self.index = index
        self.name = f"pso-node-{run_id}{suffix}"
        self.logs = logs
        # Unix socket paths are limited to ~100 bytes: the node's files live here (short),
        # and the cluster's root links to them.
        self.short_root = Path(tempfile.gettempdir()) / f"pso-{run_id}{suffix}"
        self.link = root / f"node{suffix}"
        self.cgroups = CgroupParent(f"pso-{run_id}{suffix}")
        self.supervisor_log = logs / f"node-supervisor{suffix}.log"
        self._network: NodeNetwork | None = None
        self._supervisor: Process | None = None
        self._seed: Seed | None = None

    # -- what the cluster and tests use --------------------------------------------------

    @property
    def network(self) -> NodeNetwork:
        """The node's network (available once ``create_network()`` has run)."""
        assert self._network is not None, "start() first"
        return self._network

    @property
    def node_ip(self) -> str:
        """The node's InternalIP (the node end of its veth)."""
        return self.network.node_ip

    @property
    def pod_cidr(self) -> str:
        """The node's Pod range: its CNI's IPAM range and its Node's ``spec.podCIDR``."""
        return self.network.pod_cidr

    @property
    def layout(self) -> NodeLayout:
        """Where the node's daemons see their files (``testbed.node.faults`` uses it)."""
        return NodeLayout(
            root=self.short_root,
            node_name=self.name,
            node_ip=self.node_ip,
            pod_cidr=self.pod_cidr,
            cgroup_root=self.cgroups.path,
        )

    @property
    def supervisor(self) -> Process | None:
        """The supervisor's host-side process while it runs."""
        return self._supervisor

    def running(self) -> bool:
        """Whether the node's supervisor runs (a zombie does not)."""
        return self._supervisor is not None and running(self._supervisor.pid)

    def log_files(self) -> list[Path]:
        """The node daemons' logs (containerd, kubelet, kube-proxy)."""
        return sorted((self.link / "logs").glob("*.log"))

    def load_image(self, archive: Path, ref: str) -> None:
        """Import an image archive (OCI or docker-archive) that holds ``ref`` into containerd.

        An archive the node's containerd root was seeded with (``start``'s ``images``) is
        not imported again: only checked.

        Raises:
            ProcessError: ``ctr`` failed, or the archive did not give containerd ``ref``
                (pods naming it would only wait in ``ErrImageNeverPull``).
        """
        if self._seed is None or not self._seed.holds(Archive(archive, ref)):
            self._ctr("images", "import", str(archive))
        listed = self._ctr("images", "ls", "--quiet").split()
        if ref not in listed:
            msg = f"{archive} did not give {self.name}'s containerd {ref} (it has: {listed})"
            raise ProcessError(msg)

    # -- lifecycle ---------------------------------------------------------------------

    def create_network(self) -> None:
        """Take a network slot and set up the node's namespace, veth pair and routes."""
        self._network = NodeNetwork.create(self.run_id, self.index)

    def start(
        self,
        plane: ControlPlane,
        node_dir: Path,
        proxy_kubeconfig: Path,
        images: Sequence[Archive] = (),
    ) -> None:
        """Start the node's supervisor against ``plane``, with the binaries in ``node_dir``.

        Returns once containerd runs and has the pause image and ``images`` (its root
        planted from their seed), kubelet and kube-proxy starting (the cluster waits for
        them).

        Raises:
            ProcessError: seeding or containerd failed, or the pause image is not in.
        """
        self.cgroups.create()
        self.short_root.mkdir(parents=True)
        self.link.parent.mkdir(parents=True, exist_ok=True)
        self.link.symlink_to(self.short_root)
        layout = self.layout
        spec = self._write_files(layout, plane, node_dir, proxy_kubeconfig)
        pause = make_oci_archive(
            layout.path("images/pause.tar"),
            config.SANDBOX_IMAGE,
            {"pause": node_dir / "pause"},
            ["/pause"],
        )
        self._seed = image_store.seed([Archive(pause, config.SANDBOX_IMAGE), *images])
        image_store.plant(self._seed, layout.path("containerd/root"))
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
        self._supervisor = Process(self.supervisor_log.stem, argv, self.logs)
        self._supervisor.start(layout.containerd_socket.exists)
        self.load_image(pause, config.SANDBOX_IMAGE)
        layout.path("go").touch()  # the supervisor starts kubelet and kube-proxy now

    def signal_stop(self) -> None:
        """Ask the supervisor to stop (it stops the node's daemons); returns at once."""
        # unshare blocks SIGTERM while it waits: signal its group, which holds the
        # supervisor (PID 1 inside).
        if self._supervisor is not None and self._supervisor.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._supervisor.pid, signal.SIGTERM)

    def stop_supervisor(self) -> None:
        """Stop the supervisor and wait for it (killed after 60 s); safe twice."""
        if self._supervisor is None:
            return
        self.signal_stop()
        self._supervisor.stop(timeout=60)
        self._supervisor = None

    def remove(self) -> None:
        """Remove the cgroups, the network and the files (once the supervisor has stopped)."""
        self.cgroups.remove()
        if self._network is not None:
            self._network.delete()
        if self.short_root.is_dir() and not mounts_of(self.short_root):
            shutil.rmtree(self.short_root, ignore_errors=True)
        if self.link.is_symlink():
            self.link.unlink()

    def leftovers(self) -> list[str]:
        """What of this node is still on the machine: empty once ``remove()`` worked."""
        found = processes_of(self.short_root)
        if self.short_root.exists():
            found.append(f"directory {self.short_root}")
        found += mounts_of(self.short_root)
        found += self.cgroups.leftovers()
        if self._network is not None:
            found += self._network.leftovers()
            found += _host_iptables_mentions(self._network.pod_cidr.split("/", 1)[0])
        return found

    # -- internals ---------------------------------------------------------------------

    def _write_files(
        self, layout: NodeLayout, plane: ControlPlane, node_dir: Path, proxy_kubeconfig: Path
    ) -> Path:
        """The daemons' configs and the supervisor's spec; returns the spec's path."""
        for name in ("containerd", "cni", "cni-ipam", "pod-logs", "kubelet", "logs", "images"):
            layout.path(name).mkdir(parents=True, exist_ok=True)
        kubelet_kubeconfig = plane.add_user(f"system:node:{self.name}", ["system:nodes"])
        files = {
            "containerd/config.toml": config.containerd_toml(layout),
            "cni/10-testbed.conflist": config.cni_conflist(layout),
            "kubelet/config.yaml": config.kubelet_config(layout, plane.certs / "client-ca.crt"),
            "kube-proxy.yaml": config.kube_proxy_config(layout, proxy_kubeconfig),
            config.RESOLV_CONF: config.RESOLV_CONF_TEXT,
        }
        for name, text in files.items():
            layout.path(name).write_text(text)
        kubelet = [
            str(node_dir / "kubelet"),
            f"--config={layout.path('kubelet/config.yaml')}",
            f"--kubeconfig={kubelet_kubeconfig}",
            f"--root-dir={layout.path('kubelet')}",
            f"--hostname-override={self.name}",
            f"--node-ip={self.node_ip}",
            "--v=2",
        ]
        proxy = [
            str(node_dir / "kube-proxy"),
            f"--config={layout.path('kube-proxy.yaml')}",
            "--v=2",
        ]
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

    def _ctr(self, *args: str) -> str:
        argv = ["ctr", "--address", str(self.layout.containerd_socket), "-n", "k8s.io", *args]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
        if proc.returncode != 0:
            msg = f"ctr {' '.join(args)} failed on {self.name}: {proc.stderr.strip()}"
            raise ProcessError(msg)
        return proc.stdout


def running(pid: int | None) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return pid is not None and stat.rsplit(")", 1)[1].split()[0] != "Z"


def _names(path: Path) -> re.Pattern[str]:
    """``path`` itself or anything under it (``/tmp/pso-x``, not ``/tmp/pso-x-2``)."""
    return re.compile(re.escape(str(path)) + r"(?![^/\s])")


def processes_of(path: Path) -> list[str]:
    """Processes whose command line names ``path`` or a file under it."""
    pattern = _names(path)
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if pattern.search(cmdline):
                found.append(f"process {proc.name}: {cmdline.strip()[:200]}")
    return found


def mounts_of(path: Path) -> list[str]:
    """Mounts of this mount namespace at, under or from ``path``."""
    pattern = _names(path)
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [f"mount {line.split()[4]}" for line in lines if pattern.search(line)]


def _host_iptables_mentions(pod_network: str) -> list[str]:
    """Host iptables rules that mention the Pod range (kube-proxy's belong in the netns)."""
    if shutil.which("iptables-save") is None:
        return []
    dump = subprocess.run(["iptables-save"], capture_output=True, text=True, check=False).stdout
    return [f"iptables rule {line}" for line in dump.splitlines() if pod_network in line]
