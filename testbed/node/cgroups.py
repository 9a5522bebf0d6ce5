"""The node's cgroup parent: one directory in every cgroup hierarchy, removed depth-first.

kubelet runs with ``cgroupRoot`` set to this parent (``/pso-<id>``), so every pod and
container cgroup it or runc creates lies below it, in each cgroup v1 hierarchy and in
the unified one. ``remove()`` rmdirs the whole subtree, deepest first, retrying while
the kernel still tears down the processes that were in it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from pathlib import Path

_MOUNTINFO = Path("/proc/self/mountinfo")


def hierarchies() -> list[Path]:
    """The mount points of every cgroup (v1) and cgroup2 hierarchy on this host."""
    found = []
    for line in _MOUNTINFO.read_text().splitlines():
        pre, _, post = line.partition(" - ")
        if post.split()[0] in {"cgroup", "cgroup2"}:
            found.append(Path(pre.split()[4]))
    return found


@dataclasses.dataclass(frozen=True)
class CgroupParent:
    """``/<name>`` in every cgroup hierarchy."""

    name: str

    @property
    def path(self) -> str:
        """The cgroup path kubelet takes as ``cgroupRoot``."""
        return f"/{self.name}"

    def directories(self) -> list[Path]:
        """This parent's directory in each hierarchy."""
        return [mount / self.name for mount in hierarchies()]

    def create(self) -> None:
        """Create the parent everywhere; in cpuset, copy the root's CPUs and memory nodes."""
        for directory in self.directories():
            directory.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if (directory / name).exists() and not (directory / name).read_text().strip():
                    (directory / name).write_text((directory.parent / name).read_text())

    def remove(self, timeout: float = 30) -> None:
        """Remove the parent and everything under it, deepest first, within ``timeout``."""
        deadline = time.monotonic() + timeout
        while self._existing() and time.monotonic() < deadline:
            for directory in self._existing():
                _rmdir_tree(directory)
            if self._existing():
                time.sleep(0.2)

    def cpu_seconds(self) -> float:
        """CPU time used so far by every process below the parent (its pods and containers).

        cgroup v1's ``cpuacct.usage`` (nanoseconds) where that hierarchy exists, else the
        unified hierarchy's ``cpu.stat`` ``usage_usec``. Raises ``RuntimeError`` if neither
        can be read (the parent not created, or no CPU accounting on this host).
        """
        for directory in self._existing():
            usage = directory / "cpuacct.usage"
            if usage.exists():
                return int(usage.read_text()) / 1e9
        for directory in self._existing():
            stat = directory / "cpu.stat"
            if stat.exists():
                fields = dict(line.split() for line in stat.read_text().splitlines() if line)
                if "usage_usec" in fields:
                    return int(fields["usage_usec"]) / 1e6
        msg = f"no CPU accounting for the cgroup {self.path} (not created, or none here)"
        raise RuntimeError(msg)

    def _existing(self) -> list[Path]:
        return [d for d in self.directories() if d.exists()]

    def leftovers(self) -> list[str]:
        """The parent's directories that still exist, and the processes still in them."""
        found = []
        for top in self.directories():
            if not top.exists():
                continue
            found.append(f"cgroup {top}")
            for procs in top.rglob("cgroup.procs"):
                with contextlib.suppress(OSError):
                    found += [
                        f"process {pid} in {procs.parent}" for pid in procs.read_text().split()
                    ]
        return found


def _rmdir_tree(top: Path) -> None:
    if not top.exists():
        return
    for dirpath, _dirnames, _files in os.walk(top, topdown=False):
        with contextlib.suppress(OSError):  # busy (tasks still exiting) or gone already
            Path(dirpath).rmdir()
