"""A cluster's nodes are named apart, node 1 as a single node always was (no root needed)."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest

from testbed.control_plane import Binaries
from testbed.node.cluster import NodeBinaries, NodeCluster
from testbed.node.forwarding import NodeForwarding
from testbed.node.member import NodeMember, mounts_of, processes_of
from testbed.node.network import NodeNetwork
from testbed.waits import wait_for

_BINARIES = NodeBinaries(Binaries(Path("etcd"), Path("kube-apiserver"), Path("kubectl")), Path())


def test_node_one_keeps_the_single_nodes_names(tmp_path: Path) -> None:
    """Names, paths and the cgroup of node 1 are those every single-node user knows."""
    member = NodeMember("abc123", 1, tmp_path, tmp_path / "logs")
    assert member.name == "pso-node-abc123"
    assert member.short_root == Path(tempfile.gettempdir()) / "pso-abc123"
    assert member.link == tmp_path / "node"
    assert member.cgroups.path == "/pso-abc123"
    assert member.supervisor_log == tmp_path / "logs" / "node-supervisor.log"


def test_a_second_node_adds_its_index_to_every_name(tmp_path: Path) -> None:
    """Node 2's names differ from node 1's (and do not extend them: nothing matches both)."""
    member = NodeMember("abc123", 2, tmp_path, tmp_path / "logs")
    assert member.name == "pso-node-abc123-2"
    assert member.short_root == Path(tempfile.gettempdir()) / "pso-abc123-2"
    assert member.link == tmp_path / "node-2"
    assert member.cgroups.path == "/pso-abc123-2"
    assert member.supervisor_log == tmp_path / "logs" / "node-supervisor-2.log"


def test_node_networks_are_named_apart_and_route_services_through_node_one() -> None:
    """Each node has its netns and host link (within 15 bytes); only node 1 routes Services."""
    first, second = NodeNetwork("abc123", 3), NodeNetwork("abc123", 4, 2)
    assert (first.netns, first.host_link) == ("pso-abc123", "psoabc123h")
    assert (second.netns, second.host_link) == ("pso-abc123-2", "psoabc1232h")
    assert len(second.host_link) <= 15  # IFNAMSIZ - 1
    assert first.routed == ("10.214.3.0/24", "10.215.3.0/24")
    assert second.routed == ("10.214.4.0/24",)
    assert (second.host_ip, second.node_ip) == ("10.213.4.1", "10.213.4.2")


def test_forwarding_rules_match_every_host_link_of_the_cluster() -> None:
    """The iptables interface pattern covers node 1's and node 2's host links, and is tagged."""
    forwarding = NodeForwarding("abc123")
    pattern = forwarding.links.removesuffix("+")
    assert all(
        n.host_link.startswith(pattern) for n in (NodeNetwork("abc123", 0, i) for i in (1, 2))
    )
    assert forwarding.tag == "pso-abc123"


def test_a_cluster_names_its_nodes_node_one_first(tmp_path: Path) -> None:
    """``node_names`` lists every node; ``node_name`` stays node 1's; one node by default."""
    cluster = NodeCluster(tmp_path, _BINARIES, nodes=2)
    assert cluster.node_names == [f"pso-node-{cluster.run_id}", f"pso-node-{cluster.run_id}-2"]
    assert cluster.node_name == cluster.node_names[0]
    single = NodeCluster(tmp_path, _BINARIES)
    assert single.node_names == [f"pso-node-{single.run_id}"]
    with pytest.raises(ValueError, match="needs a node"):
        NodeCluster(tmp_path, _BINARIES, nodes=0)


def test_leftover_checks_tell_a_path_from_a_sibling_that_extends_its_name(tmp_path: Path) -> None:
    """``/tmp/pso-x``'s checks match it and what is under it, never ``/tmp/pso-x-2``."""
    first, second = tmp_path / "pso-x", tmp_path / "pso-x-2"
    # "; :" keeps sh from exec'ing sleep: its command line keeps naming the file.
    proc = subprocess.Popen(["sh", "-c", "sleep 30; :", f"{second}/config.toml"])
    try:
        found = wait_for(lambda: processes_of(second), "sh's command line", 10, 0.05)
        assert f"process {proc.pid}" in [p.split(":")[0] for p in found]  # (and sleep, forking)
        assert processes_of(first) == []
    finally:
        proc.kill()
        proc.wait()
    assert "mount /proc" in mounts_of(Path("/proc"))
    assert mounts_of(Path("/pro")) == []
