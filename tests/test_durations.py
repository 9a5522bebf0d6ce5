"""The end-of-run summary (``tests.durations``): time and CPU per folder, tier and test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import durations

pytest_plugins = ("pytester",)

CONFTEST = """
pytest_plugins = ("tests.tiers", "tests.durations")
"""

TESTS = """
import subprocess
import sys
import time

def test_burns_cpu_in_a_child():
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(6_000_000))"], check=True)

def test_sleeps():
    time.sleep(0.3)
"""


@pytest.fixture
def summary(pytester: pytest.Pytester, repo_on_path: Path) -> pytest.Pytester:
    """A tiny suite using the plugin, with this repository importable."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_cost=TESTS)
    assert (repo_on_path / "tests" / "durations.py").exists()
    return pytester


def cpu_of(lines: list[str], name: str) -> float:
    """The CPU seconds the costliest-tests table gives test ``name``."""
    (line,) = [line for line in lines if "s CPU  " in line and line.endswith(name)]
    return float(line.split("s CPU")[0])


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["plain", "xdist"])
def test_a_childs_cpu_is_the_tests_and_a_sleep_costs_none(
    summary: pytest.Pytester, workers: list[str]
) -> None:
    """The CPU a test's child burns is counted for it; sleeping is time, not CPU."""
    result = summary.runpytest_subprocess(*workers, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    lines = result.stdout.lines
    assert any("CPU per folder" in line for line in lines)
    burned = cpu_of(lines, "test_cost.py::test_burns_cpu_in_a_child")
    slept = cpu_of(lines, "test_cost.py::test_sleeps")
    assert burned > 0.2, lines
    assert slept < burned / 2, lines


GROUPED = """
import time

import pytest

@pytest.mark.xdist_group("pair")
def test_first():
    time.sleep(0.3)

@pytest.mark.xdist_group("pair")
def test_second():
    time.sleep(0.3)
"""


def seconds_before(line: str, marker: str) -> float:
    """The number just before ``marker`` in ``line`` (``'0.6s from'`` -> 0.6)."""
    return float(line.split(marker, maxsplit=1)[0].rsplit(" ", 1)[-1].rstrip("s"))


def test_a_group_and_a_tier_show_their_span(pytester: pytest.Pytester, repo_on_path: Path) -> None:
    """A group run one test after another spans at least both; so does its tier."""
    assert (repo_on_path / "tests" / "durations.py").exists()
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_grouped=GROUPED)
    result = pytester.runpytest_subprocess(
        "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=2)
    (group,) = [line for line in result.stdout.lines if " in group pair (2 tests)" in line]
    (tier,) = [line for line in result.stdout.lines if " in tier unit (2 tests)" in line]
    for line in (group, tier):
        assert seconds_before(line, "s from its first start") >= 0.6, line


@pytest.mark.parametrize(
    ("nodeid", "group"),
    [
        ("tests/a.py::test_b@host", "host"),
        ("tests/a.py::test_b[x]@host-pods", "host-pods"),
        ("tests/a.py::test_b[me@example.com]", ""),
        ("tests/a.py::test_b[a@b/c]", ""),
        ("tests/a.py::test_b", ""),
    ],
)
def test_the_group_is_the_suffix_xdist_gives_not_a_parameters_at(nodeid: str, group: str) -> None:
    """Only ``--dist loadgroup``'s suffix names a group."""
    assert durations.group_of(nodeid) == group


def test_every_tests_record_is_kept_in_the_cache(summary: pytest.Pytester) -> None:
    """Under xdist, the controller keeps each test's phases, span and CPU for the next run."""
    result = summary.runpytest_subprocess("-n", "2")
    result.assert_outcomes(passed=2)
    key = summary.path / ".pytest_cache" / "v" / durations.CACHE_KEY
    kept = json.loads(key.read_text())
    assert kept["wall"] > 0
    tests = kept["tests"]
    assert set(tests) == {"test_cost.py::test_burns_cpu_in_a_child", "test_cost.py::test_sleeps"}
    slept = tests["test_cost.py::test_sleeps"]
    assert slept["call"] >= 0.3
    assert slept["stop"] - slept["start"] >= slept["call"]
    assert {"setup", "teardown", "cpu", "group"} <= set(slept)
    assert tests["test_cost.py::test_burns_cpu_in_a_child"]["cpu"] > slept["cpu"]


SHARED = """
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.waits import wait_for

TICKS = 100

@pytest.fixture(scope="module")
def burner():
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield child
    child.kill()
    child.wait()

def cpu_of(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS

def test_first_while_it_burns(burner):
    wait_for(lambda: cpu_of(burner.pid) >= 0.6, "0.6 s burned", timeout=60, interval=0.02)

def test_second_reaps_it(burner):
    pass
"""


def test_a_process_that_outlives_a_test_costs_each_test_what_it_burned_then(
    pytester: pytest.Pytester, repo_on_path: Path
) -> None:
    """A module fixture's child burns during the first test and is reaped after the second.

    Counting only reaped children gave all of it to the second (its teardown reaps it);
    the live descendants' CPU gives it to the first, while the second pays its last moments.
    """
    assert (repo_on_path / "tests" / "durations.py").exists()
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_shared=SHARED.replace("TICKS = 100", f"TICKS = {durations.TICKS}"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    lines = result.stdout.lines
    first = cpu_of(lines, "test_shared.py::test_first_while_it_burns")
    second = cpu_of(lines, "test_shared.py::test_second_reaps_it")
    assert first >= 0.5, lines
    assert second < first / 2, lines


def stat_line(pid: int, name: str, times: tuple[int, int, int, int]) -> str:
    """A ``/proc/<pid>/stat`` line with ``times`` as utime, stime, cutime, cstime."""
    before = ["S", "1"] + ["0"] * 9  # fields 3 to 13
    return f"{pid} ({name}) " + " ".join([*before, *map(str, times), "20", "0"]) + "\n"


def test_descendants_cpu_sums_the_live_tree_with_what_each_reaped(tmp_path: Path) -> None:
    """Children of every thread, grandchildren, their reaped children; gone ones are skipped."""
    children: dict[int, dict[int, list[int]]] = {
        10: {10: [12], 11: [13, 15]},
        12: {12: [14]},
        13: {13: []},
        14: {14: []},
    }
    names = {12: "a) b", 13: "c", 14: "d"}  # a name may hold ") "; 15 has gone
    times = {12: (100, 50, 30, 20), 13: (10, 10, 0, 0), 14: (1, 1, 1, 1)}
    for pid, tasks in children.items():
        for task, kids in tasks.items():
            (tmp_path / str(pid) / "task" / str(task)).mkdir(parents=True)
            text = "".join(f"{kid} " for kid in kids)
            (tmp_path / str(pid) / "task" / str(task) / "children").write_text(text)
        if pid in times:
            (tmp_path / str(pid) / "stat").write_text(stat_line(pid, names[pid], times[pid]))
    total = sum(sum(t) for t in times.values())
    assert durations.descendants_cpu(10, tmp_path) == pytest.approx(total / durations.TICKS)
    assert durations.descendants_cpu(99, tmp_path) == 0
