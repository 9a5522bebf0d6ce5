"""The node's network: its own network namespace, joined to the host by a veth pair.

Each run takes a free slot ``n`` (under a host-wide lock) and uses:

- ``10.213.n.0/30`` for the veth pair: the host end ``.1`` (``host_ip``: where pods reach
  servers on the host, and where kube-apiserver listens), the node end ``.2`` (the node's
  InternalIP);
- ``10.214.n.0/24`` for Pods and ``10.215.n.0/24`` for Services, both routed from the host
  through the node end, so the host reaches Pod IPs and ClusterIPs directly.

Names carry the run id (``pso-<id>`` netns, ``pso<id>h`` host link), so parallel sessions
never collide. A cluster's further nodes (``index`` 2, 3, ...) each take a slot of their own
and add the index to the names (``pso-<id>-2``, ``pso<id>2h``); only the first node's slot
routes its Service range (the cluster's), through that node's kube-proxy; the others' Service
ranges stay unused. ``delete()`` removes the namespace (which takes the veth pair and its
routes with it) and anything that might have survived; ``leftovers()`` lists what is
still there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import ipaddress
import subprocess
from collections.abc import Iterator
from pathlib import Path

_LOCK = Path("/run/lock/pulumi-stack-operator-node.lock")
_SLOTS = 64


@dataclasses.dataclass(frozen=True)
class NodeNetwork:
    """One node's network namespace, veth pair, addresses and host routes."""

    run_id: str
    slot: int
    index: int = 1  # the node's number in its cluster: 1 keeps the single node's names

    @property
    def netns(self) -> str:
        """The network namespace's name (``ip netns``)."""
        return f"pso-{self.run_id}" + (f"-{self.index}" if self.index > 1 else "")

    @property
    def netns_path(self) -> Path:
        """The namespace's bind mount, for ``nsenter --net=``."""
        return Path("/run/netns") / self.netns

    @property
    def host_link(self) -> str:
        """The host end of the veth pair."""
        return f"pso{self.run_id}{self._link_index}h"

    @property
    def _link_index(self) -> str:
        return str(self.index) if self.index > 1 else ""

    @property
    def host_ip(self) -> str:
        """The host end's address: kube-apiserver and host servers pods reach."""
        return f"10.213.{self.slot}.1"

    @property
    def node_ip(self) -> str:
        """The node end's address: the Node's InternalIP."""
        return f"10.213.{self.slot}.2"

    @property
    def pod_cidr(self) -> str:
        """The Pod range (the node's podCIDR)."""
        return f"10.214.{self.slot}.0/24"

    @property
    def service_cidr(self) -> str:
        """The slot's Service ClusterIP range (the cluster's, when ``index`` is 1)."""
        return f"10.215.{self.slot}.0/24"

    @property
    def routed(self) -> tuple[str, ...]:
        """The ranges the host routes through the node end: Pods, and Services on node 1."""
        if self.index > 1:
            return (self.pod_cidr,)
        return (self.pod_cidr, self.service_cidr)

    @classmethod
    def create(cls, run_id: str, index: int = 1) -> NodeNetwork:
        """Take a free slot and set up the namespace, veth pair and routes of node ``index``.

        Raises:
            RuntimeError: every slot is taken.
            subprocess.CalledProcessError: an ``ip`` command failed (nothing is left).
        """
        with _host_lock():
            taken = _routed_networks()
            for slot in range(_SLOTS):
                network = cls(run_id, slot, index)
                if not any(
                    net.overlaps(taken_net) for net in network._nets() for taken_net in taken
                ):
                    break
            else:
                msg = f"all {_SLOTS} node network slots (10.213-215.x) are in use"
                raise RuntimeError(msg)
            try:
                network._set_up()
            except subprocess.CalledProcessError:
                network.delete()
                raise
        return network

    def delete(self) -> None:
        """Remove the namespace, the veth pair and the routes; safe to call twice."""
        _ip("netns", "delete", self.netns, check=False)
        _ip("link", "delete", self.host_link, check=False)
        for cidr in self.routed:
            _ip("route", "delete", cidr, "dev", self.host_link, check=False)

    def leftovers(self) -> list[str]:
        """What of this network is still on the host (empty after ``delete()``).

        A route counts when it leads to this network's Pod or Service range through its own
        link: another node, started as soon as this one freed its slot, has routes to the
        same ranges through a link of its own.
        """
        found: list[str] = []
        if self.netns_path.exists() or self.netns in _ip("netns", "list").split():
            found.append(f"network namespace {self.netns}")
        if _ip("link", "show", self.host_link, check=False):
            found.append(f"link {self.host_link}")
        routes = _ip("route", "show")
        found += [
            f"route {line}"
            for line in routes.splitlines()
            if any(c.split("/", 1)[0] in line for c in self.routed)
            and f" dev {self.host_link} " in f" {line} "
        ]
        return found

    def _nets(self) -> list[ipaddress.IPv4Network]:
        cidrs = (f"10.213.{self.slot}.0/30", self.pod_cidr, self.service_cidr)
        return [ipaddress.IPv4Network(c) for c in cidrs]

    def _set_up(self) -> None:
        ns, node_link = self.netns, f"pso{self.run_id}{self._link_index}n"
        _ip("netns", "add", ns)
        _ip("link", "add", self.host_link, "type", "veth", "peer", "name", node_link, "netns", ns)
        _ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_link)
        _ip("link", "set", self.host_link, "up")
        _ip("-n", ns, "link", "set", node_link, "name", "eth0")
        _ip("-n", ns, "addr", "add", f"{self.node_ip}/30", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "route", "add", "default", "via", self.host_ip)
        subprocess.run(
            ["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1"],
            check=True,
            capture_output=True,
        )
        for cidr in self.routed:
            _ip("route", "add", cidr, "via", self.node_ip, "dev", self.host_link)


@contextlib.contextmanager
def _host_lock() -> Iterator[None]:
    _LOCK.parent.mkdir(parents=True, exist_ok=True)
    with _LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _routed_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network the host has a route to (except the default route)."""
    nets = []
    for line in _ip("route", "show", "table", "all").splitlines():
        dest = line.split()[0] if line.split() else ""
        if dest in {"default", "broadcast", "local", "unreachable"}:
            dest = line.split()[1] if dest != "default" else ""
        with contextlib.suppress(ValueError):
            nets.append(ipaddress.IPv4Network(dest, strict=False))
    return nets


def _ip(*args: str, check: bool = True) -> str:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise subprocess.CalledProcessError(
            proc.returncode, ["ip", *args], proc.stdout, proc.stderr
        )
    return proc.stdout if proc.returncode == 0 else ""
