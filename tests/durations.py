"""Where the time and the CPU go: a per-folder summary at the end of every run.

Role: a pytest plugin (registered by ``tests/conftest.py``) that adds up each test's
setup, call and teardown time by the folder of its file and prints, after pytest's own
``--durations`` list, one line per folder: tests, summed seconds and share, slowest first;
then the same per tier (``tests.tiers``): the ``node`` tier runs in the workers of its
four xdist groups, so its largest group's sum is a floor under the wall time however many
workers run the rest; then per xdist group, each tier and group also with its span (its
first test's start to its last test's end, the tier's wall time). Under pytest-xdist the
reports reach the controller, so the sums cover every worker; their total exceeds the wall
time by the parallelism won.

Beside the time, the CPU each test cost, from setup to teardown, carried to the controller
on the teardown report: its worker's own CPU time (user + system), that of the processes
the worker reaped (an operator, the CLI under it, a control plane stopped at the end), and
that of the worker's live descendants (each one's own and its reaped children's, read from
``/proc``). The live part makes a process that outlives one test (a module's control plane,
a session's servers) cost each test what it burned while that test ran, not all of it to
the test in whose teardown it is reaped: at the reap its total moves from the live sum to
the reaped one. Two cores bound the suite, so that is the cost a test adds to everyone's
run. It misses processes that left the worker's tree (a node's pods, children of
containerd; a daemon that detached). Printed per folder and as the CPU-costliest tests.

Every test's phases, span, CPU and group are also kept in pytest's cache, for the next
change to start from the whole list rather than the 30 slowest (``CACHE_KEY``:
``.pytest_cache/v/pulumi-stack-operator/durations``, one JSON object per test id, the
run's wall time beside them; the last run's replaces the one before).

Guarantees: reads reports only; prints nothing when no test ran; writes the cache only
from the controller (or the only process), and not at all without the cache plugin.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import resource
import time
from collections.abc import Generator
from pathlib import Path, PurePosixPath

import pytest

from tests.tiers import MARKERS, tier_of

CPU_PROPERTY = "cpu_seconds"
CPU_SHOWN = 15
CACHE_KEY = "pulumi-stack-operator/durations"
PROC = Path("/proc")
TICKS = os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass
class _Folder:
    tests: set[str] = dataclasses.field(default_factory=set)
    seconds: float = 0.0
    cpu: float = 0.0
    first_start: float = float("inf")
    last_stop: float = 0.0

    def add(self, report: pytest.TestReport) -> None:
        """Count one phase of one test: its time and the span it falls in."""
        self.tests.add(report.nodeid)
        self.seconds += report.duration
        self.first_start = min(self.first_start, report.start)
        self.last_stop = max(self.last_stop, report.stop)

    @property
    def span(self) -> float:
        """Seconds from the first phase's start to the last phase's end (0 when none)."""
        return max(self.last_stop - self.first_start, 0.0)


_folders: dict[str, _Folder] = collections.defaultdict(_Folder)
_tiers: dict[str, _Folder] = collections.defaultdict(_Folder)
_groups: dict[str, _Folder] = collections.defaultdict(_Folder)
_started = [time.monotonic()]
_cpu_at_setup: dict[str, float] = {}
_cpu_of_test: dict[str, float] = {}
_records: dict[str, dict[str, float | str]] = {}


def cpu_seconds(proc: Path = PROC) -> float:
    """CPU time (user + system) of this process, its reaped children and its live descendants."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    reaped = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    return reaped + descendants_cpu(os.getpid(), proc)


def descendants_cpu(pid: int, proc: Path = PROC) -> float:
    """Seconds of CPU of ``pid``'s live descendants, each with its reaped children's.

    Each process's ``utime + stime + cutime + cstime`` (``/proc/<pid>/stat``): a process
    reaped by a live descendant is in that one's ``c*time``, so nothing counts twice. One
    that ends between the reads is missed for this reading only.
    """
    ticks, pending, seen = 0, _children(pid, proc), set()
    while pending:
        child = pending.pop()
        if child in seen:
            continue
        seen.add(child)
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (proc / str(child) / "stat").read_text(encoding="ascii", errors="replace")
            fields = stat.rsplit(")", 1)[1].split()
            ticks += sum(int(field) for field in fields[11:15])  # utime stime cutime cstime
            pending.extend(_children(child, proc))
    return ticks / TICKS


def _children(pid: int, proc: Path) -> list[int]:
    """The live children of every thread of ``pid`` (none when it has gone)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in (proc / str(pid) / "task").iterdir():
            with contextlib.suppress(OSError):
                found.extend(int(word) for word in (task / "children").read_text().split())
    return found


def folder_of(nodeid: str) -> str:
    """``tests/e2e`` for ``tests/e2e/test_x.py::test_y[a]``."""
    return str(PurePosixPath(nodeid.split("::", 1)[0]).parent)


def group_of(nodeid: str) -> str:
    """The xdist group ``--dist loadgroup`` suffixed to ``nodeid`` ("" when none).

    ``tests/a.py::t[x]@host`` -> ``host``; an ``@`` inside a parameter's id is not one.
    """
    head, at, group = nodeid.rpartition("@")
    if not at or "::" not in head or "]" in group or "/" in group or "::" in group:
        return ""
    return group


def pytest_sessionstart() -> None:
    """Start the wall clock."""
    _started[0] = time.monotonic()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    """On the worker: note the CPU spent so far, as the test's setup begins."""
    _cpu_at_setup[item.nodeid] = cpu_seconds()
    yield


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """On the worker: put the test's CPU, setup to teardown, on its teardown report."""
    report: pytest.TestReport = yield
    if call.when == "teardown" and item.nodeid in _cpu_at_setup:
        spent = cpu_seconds() - _cpu_at_setup.pop(item.nodeid)
        report.user_properties.append((CPU_PROPERTY, round(max(spent, 0.0), 3)))
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add one phase of one test (and, on its teardown, its CPU) to its folder."""
    folder = _folders[folder_of(report.nodeid)]
    folder.add(report)
    tier = _tiers[tier_of({name for name in report.keywords if name in MARKERS})]
    tier.add(report)
    group = group_of(report.nodeid)
    if group:
        _groups[group].add(report)
    record = _records.setdefault(report.nodeid, {"start": report.start, "group": group})
    record[report.when] = round(report.duration, 3)
    record["stop"] = report.stop
    for name, value in report.user_properties:
        if name == CPU_PROPERTY and isinstance(value, int | float):
            folder.cpu += value
            tier.cpu += value
            _cpu_of_test[report.nodeid] = value
            record["cpu"] = value


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On the controller: keep every test's record in pytest's cache (module docstring)."""
    cache = getattr(session.config, "cache", None)
    if hasattr(session.config, "workerinput") or cache is None or not _records:
        return
    wall = round(time.monotonic() - _started[0], 1)
    cache.set(CACHE_KEY, {"wall": wall, "tests": _records})


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the per-folder table."""
    if not _folders:
        return
    total = sum(f.seconds for f in _folders.values()) or 1.0
    wall = time.monotonic() - _started[0]
    write = terminalreporter.write_line
    terminalreporter.section("time per folder (setup + call + teardown)")
    for name, folder in sorted(_folders.items(), key=lambda kv: -kv[1].seconds):
        share = 100 * folder.seconds / total
        write(f"{folder.seconds:9.1f}s {share:5.1f}%  {len(folder.tests):5d} tests  {name}")
    write(f"{total:9.1f}s summed over tests; {wall:.1f}s wall")
    for name, tier in sorted(_tiers.items(), key=lambda kv: -kv[1].seconds):
        write(
            f"{tier.seconds:9.1f}s in tier {name} ({len(tier.tests)} tests), "
            f"{tier.span:.1f}s from its first start to its last end"
        )
    for name, group in sorted(_groups.items(), key=lambda kv: -kv[1].span):
        write(
            f"{group.seconds:9.1f}s in group {name} ({len(group.tests)} tests), "
            f"{group.span:.1f}s from its first start to its last end"
        )
    if _cpu_of_test:
        _write_cpu(terminalreporter)


def _write_cpu(terminalreporter: pytest.TerminalReporter) -> None:
    """The CPU table: per folder, per tier, then the costliest tests."""
    write = terminalreporter.write_line
    terminalreporter.section("CPU per folder (the worker, what it reaped, its live descendants)")
    for name, folder in sorted(_folders.items(), key=lambda kv: -kv[1].cpu)[:CPU_SHOWN]:
        write(f"{folder.cpu:9.1f}s CPU  {folder.seconds:9.1f}s time  {name}")
    for name, tier in sorted(_tiers.items(), key=lambda kv: -kv[1].cpu):
        write(f"{tier.cpu:9.1f}s CPU in tier {name}")
    write(f"{sum(_cpu_of_test.values()):9.1f}s CPU summed over tests")
    terminalreporter.section(f"the {CPU_SHOWN} CPU-costliest tests")
    for nodeid, cpu in sorted(_cpu_of_test.items(), key=lambda kv: -kv[1])[:CPU_SHOWN]:
        write(f"{cpu:8.1f}s CPU  {nodeid}")
