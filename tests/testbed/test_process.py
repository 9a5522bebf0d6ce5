"""free_port: workers of pytest-xdist never hand out the same port."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from testbed import process

EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ports(monkeypatch: pytest.MonkeyPatch, worker: str, count: int) -> list[int]:
    """``count`` ports handed out as ``worker`` would, with a fresh memory."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setattr(process, "_recent_ports", {})
    monkeypatch.setattr(process, "_cursor", [0])
    return [process.free_port() for _ in range(count)]


def test_each_worker_hands_out_ports_of_its_own_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """gw0 and gw1 get disjoint ports, all below the kernel's ephemeral range."""
    first, second = ports(monkeypatch, "gw0", 50), ports(monkeypatch, "gw1", 50)
    assert not set(first) & set(second)
    assert all(port < 32768 for port in first + second)
    assert len(set(first)) == len(first)


def test_a_port_in_use_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A port some process holds is never handed out.

    The last block's worker: no real worker of this run uses it (``make test`` runs a few),
    so the test holds its first port without racing a worker's control plane.
    """
    last = process.WORKER_BLOCKS - 1
    block = process.worker_block(last)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", block[0]))
        handed = ports(monkeypatch, f"gw{last}", 3)
    assert block[0] not in handed
    assert handed == [block[1], block[2], block[3]]


def test_outside_a_worker_the_kernel_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without xdist, ports come from the ephemeral range, as envtest's do."""
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.setattr(process, "_recent_ports", {})
    low, high = (int(v) for v in EPHEMERAL.read_text().split())
    assert low <= process.free_port() <= high
