"""testbed.node.cgroups: the parent's CPU time, from cgroup v1 or the unified hierarchy."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.node import cgroups
from testbed.node.cgroups import CgroupParent


def mounted(monkeypatch: pytest.MonkeyPatch, *mounts: Path) -> CgroupParent:
    """A parent ``pso-x`` created under ``mounts``, taken for this host's hierarchies."""
    monkeypatch.setattr(cgroups, "hierarchies", lambda: list(mounts))
    for mount in mounts:
        (mount / "pso-x").mkdir(parents=True)
    return CgroupParent("pso-x")


def test_cpu_seconds_read_cgroup_v1_cpuacct(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cpuacct.usage is nanoseconds; a hierarchy without it (memory) is passed over."""
    parent = mounted(monkeypatch, tmp_path / "memory", tmp_path / "cpuacct")
    (tmp_path / "cpuacct" / "pso-x" / "cpuacct.usage").write_text("2500000000\n")
    assert parent.cpu_seconds() == 2.5


def test_cpu_seconds_read_the_unified_cpu_stat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unified hierarchy (cgroup v2): cpu.stat's usage_usec."""
    parent = mounted(monkeypatch, tmp_path / "unified")
    stat = "usage_usec 1250000\nuser_usec 1000000\nsystem_usec 250000\n"
    (tmp_path / "unified" / "pso-x" / "cpu.stat").write_text(stat)
    assert parent.cpu_seconds() == 1.25


def test_cpu_seconds_without_accounting_raise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No parent, or no CPU file in it: RuntimeError naming the cgroup."""
    parent = mounted(monkeypatch, tmp_path / "pids")
    with pytest.raises(RuntimeError, match="/pso-x"):
        parent.cpu_seconds()
