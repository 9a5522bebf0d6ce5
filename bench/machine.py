"""Facts about the machine and its load, read from ``/proc``.

The benchmarks run on a shared 2-core machine, so every figure is reported next to the load
it was measured under: load averages, how busy the CPUs were (``/proc/stat``), and how much
CPU the operator and the children it reaped used (``/proc/<pid>/stat``: utime + stime +
cutime + cstime; the Pulumi CLI and its plugins count once the operator has waited for them).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import threading
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_model() -> str:
    """The CPU's model name, or the machine type."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def cores() -> int:
    """CPUs this process may run on."""
    return len(os.sched_getaffinity(0))


def loadavg() -> tuple[float, float, float]:
    """The 1-, 5- and 15-minute load averages."""
    one, five, fifteen = os.getloadavg()
    return one, five, fifteen


def utc_now() -> str:
    """The current UTC time, to the minute (ISO 8601)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%MZ")


@dataclasses.dataclass(frozen=True)
class CpuTimes:
    """Cumulative busy and total CPU ticks of the whole machine (``/proc/stat``)."""

    busy: int
    total: int

    @classmethod
    def now(cls) -> CpuTimes:
        """Read ``/proc/stat``'s aggregate line."""
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        total = sum(fields[:8])  # guest time is already counted in user/nice
        return cls(busy=total - idle, total=total)

    def busy_fraction_since(self, earlier: CpuTimes) -> float:
        """The share (0-1) of all CPUs' time spent busy since ``earlier``."""
        total = self.total - earlier.total
        return (self.busy - earlier.busy) / total if total else 0.0


def process_cpu_seconds(pid: int, *, children: bool = True) -> float:
    """CPU seconds of ``pid`` and of the children it has reaped (``children=False``: not)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()  # the command name may hold spaces
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    reaped = cutime + cstime if children else 0
    return (utime + stime + reaped) / _TICK


def memory_kib(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` (peak RSS) of ``pid``, in KiB."""
    found: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            found[name] = int(value.split()[0])
    return found


class LoadSampler:
    """Samples the 1-minute load average every ``interval`` seconds on a daemon thread."""

    def __init__(self, interval: float = 5.0) -> None:
        """Prepare; ``start`` begins sampling."""
        self.samples: list[float] = []
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load-sampler", daemon=True)

    def start(self) -> None:
        """Take the first sample now and keep sampling."""
        self._thread.start()

    def stop(self) -> None:
        """Take a last sample and stop."""
        self._stop.set()
        self._thread.join(self._interval + 1)
        self.samples.append(loadavg()[0])

    def _run(self) -> None:
        while True:
            self.samples.append(loadavg()[0])
            if self._stop.wait(self._interval):
                return
