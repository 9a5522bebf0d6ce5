"""Forwarding through the host between the nodes of one cluster, and nowhere else.

With two nodes, pods talk to pods of the other node (directly, or through a Service whose
endpoint is there) through the host: node A's namespace -> its veth -> the host -> node
B's veth. The host then forwards, which this machine does not by default
(``net.ipv4.ip_forward`` is 0 here). ``NodeForwarding`` changes no host-wide setting:

- IPv4 forwards a packet when forwarding is on for the interface it came in on
  (``net.ipv4.conf.<link>.forwarding``), so ``enable()`` turns it on for the cluster's own
  host links only: the setting goes away with the links;
- two rules at the top of the host's ``FORWARD`` chain, tagged ``--comment pso-<id>``:
  ACCEPT from one of the cluster's links (``pso<id>+``) to another (whatever the chain's
  policy: a host with Docker drops forwarded traffic), and REJECT (ICMP host
  unreachable) from them to anywhere else, so pods still have no way out and fail at
  once, as on a single node (where the host does not forward at all).

``disable()`` deletes every rule carrying the tag; safe to call twice. ``leftovers()`` lists
the tagged rules still there (the links, and their setting, are the networks' to remove).
"""

from __future__ import annotations

import dataclasses
import shlex
import shutil
import subprocess
from pathlib import Path

_CHAIN = "FORWARD"


@dataclasses.dataclass(frozen=True)
class NodeForwarding:
    """The host's forwarding between the links of cluster ``run_id`` (``pso<id>...h``)."""

    run_id: str

    @property
    def tag(self) -> str:
        """The comment on every rule of this cluster's."""
        return f"pso-{self.run_id}"

    @property
    def links(self) -> str:
        """An iptables interface pattern for every host link of the cluster."""
        return f"pso{self.run_id}+"

    def enable(self, host_links: list[str]) -> None:
        """Forward between ``host_links`` (the cluster's, ``NodeNetwork.host_link``).

        Raises:
            subprocess.CalledProcessError: iptables failed.
        """
        for link in host_links:
            _link_forwarding(link).write_text("1")
        tag = ["-m", "comment", "--comment", self.tag]
        reject = ["-j", "REJECT", "--reject-with", "icmp-host-unreachable"]
        # Each inserted at the top: the ACCEPT, inserted last, comes first.
        _iptables("-I", _CHAIN, "1", "-i", self.links, "!", "-o", self.links, *tag, *reject)
        _iptables("-I", _CHAIN, "1", "-i", self.links, "-o", self.links, *tag, "-j", "ACCEPT")

    def disable(self) -> None:
        """Delete this cluster's rules; safe twice (the links' setting goes with the links)."""
        for rule in self._rules():
            _iptables("-D", *shlex.split(rule)[1:], check=False)

    def leftovers(self) -> list[str]:
        """This cluster's rules still in the host's FORWARD chain."""
        return [f"iptables rule {rule}" for rule in self._rules()]

    def _rules(self) -> list[str]:
        """This cluster's rules, as ``iptables -S`` prints them (``-A FORWARD ...``)."""
        if shutil.which("iptables") is None:
            return []
        listed = _iptables("-S", _CHAIN, check=False)
        return [line for line in listed.splitlines() if f"--comment {self.tag}" in line]


def _link_forwarding(link: str) -> Path:
    return Path("/proc/sys/net/ipv4/conf") / link / "forwarding"


def _iptables(*args: str, check: bool = True) -> str:
    argv = ["iptables", "-w", "30", *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if check and proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, argv, proc.stdout, proc.stderr)
    return proc.stdout
