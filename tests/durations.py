"""Where the time goes: a per-folder summary at the end of every run.

Role: a pytest plugin (registered by ``tests/conftest.py``) that adds up each test's
setup, call and teardown time by the folder of its file and prints, after pytest's own
``--durations`` list, one line per folder: tests, summed seconds and share, slowest first;
then the same per tier (``tests.tiers``): the ``node`` tier runs in the workers of its
four xdist groups, so its largest group's sum is a floor under the wall time however many
workers run the rest. Under pytest-xdist the reports reach the controller, so the sums cover every
worker; their total exceeds the wall time by the parallelism won.

Guarantees: reads reports only; prints nothing when no test ran.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from pathlib import PurePosixPath

import pytest

from tests.tiers import MARKERS, tier_of


@dataclasses.dataclass
class _Folder:
    tests: set[str] = dataclasses.field(default_factory=set)
    seconds: float = 0.0


_folders: dict[str, _Folder] = collections.defaultdict(_Folder)
_tiers: dict[str, _Folder] = collections.defaultdict(_Folder)
_started = [time.monotonic()]


def folder_of(nodeid: str) -> str:
    """``tests/e2e`` for ``tests/e2e/test_x.py::test_y[a]``."""
    return str(PurePosixPath(nodeid.split("::", 1)[0]).parent)


def pytest_sessionstart() -> None:
    """Start the wall clock."""
    _started[0] = time.monotonic()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add one phase of one test to its folder."""
    folder = _folders[folder_of(report.nodeid)]
    folder.tests.add(report.nodeid)
    folder.seconds += report.duration
    tier = _tiers[tier_of({name for name in report.keywords if name in MARKERS})]
    tier.tests.add(report.nodeid)
    tier.seconds += report.duration


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
        write(f"{tier.seconds:9.1f}s in tier {name} ({len(tier.tests)} tests)")
