"""The end-of-run summary (``tests.durations``): time and CPU per folder, tier and test."""

from __future__ import annotations

from pathlib import Path

import pytest

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
