"""The tiers plugin: markers follow fixtures and binaries, and ``--tier`` selects by them."""

from __future__ import annotations

import pytest

pytest_plugins = ("pytester",)

CONFTEST = """
import pytest

pytest_plugins = ("tests.tiers",)

@pytest.fixture
def control_plane():
    return "plane"

@pytest.fixture
def stack_crd(control_plane):
    return control_plane

@pytest.fixture
def node_cluster():
    return "node"
"""

TESTS = """
import subprocess
import sys

import pytest

def test_unit():
    pass

def test_integration(stack_crd):
    pass

def test_node(node_cluster):
    pass

def test_dynamic(request):
    request.getfixturevalue("control_plane")

def test_runs_git():
    subprocess.run(["git", "--version"], capture_output=True, check=False)

@pytest.mark.git
def test_runs_git_marked():
    subprocess.run(["git", "--version"], capture_output=True, check=False)

def test_runs_python():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_uses_a_cached_answer():
    from tests.tiers import record_use
    record_use("kubectl")

@pytest.mark.integration
def test_uses_a_cached_answer_marked():
    from tests.tiers import record_use
    record_use("kubectl")
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    """A tiny suite using the plugin."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=TESTS)
    return pytester


def outcomes(result: pytest.RunResult) -> dict[str, str]:
    """Test name -> "passed", "failed" (in any phase) or "skipped"."""
    words: dict[str, str] = {}
    reports = result.reprec.getreports("pytest_runtest_logreport")  # type: ignore[attr-defined]
    for report in reports:
        name = report.nodeid.split("::", 1)[1]
        if report.failed or words.get(name) == "failed":
            words[name] = "failed"
        elif report.when == "call" or report.skipped:
            words[name] = report.outcome
    return words


def test_markers_follow_the_fixture_closure(suite: pytest.Pytester) -> None:
    """A fixture's dependency marks the test; ``--tier`` keeps the tests of one tier."""
    selected = {
        tier: set(outcomes(suite.runpytest_inprocess(f"--tier={tier}", "-p", "no:cacheprovider")))
        for tier in ("unit", "e2e", "node")
    }
    assert selected == {
        "unit": {
            "test_unit",
            "test_dynamic",
            "test_runs_git",
            "test_runs_python",
            "test_uses_a_cached_answer",
        },
        "e2e": {"test_integration", "test_runs_git_marked", "test_uses_a_cached_answer_marked"},
        "node": {"test_node"},
    }


def test_unmarked_real_components_fail_at_teardown(suite: pytest.Pytester) -> None:
    """Unmarked use fails: a fixture via getfixturevalue, git started, a cached kubectl answer."""
    result = suite.runpytest_inprocess("-p", "no:cacheprovider")
    words = outcomes(result)
    assert words == {
        "test_unit": "passed",
        "test_integration": "passed",
        "test_node": "passed",
        "test_dynamic": "failed",
        "test_runs_git": "failed",
        "test_runs_git_marked": "passed",
        "test_runs_python": "passed",
        "test_uses_a_cached_answer": "failed",
        "test_uses_a_cached_answer_marked": "passed",
    }
    text = result.stdout.str()
    assert "control_plane (mark it 'integration')" in text
    assert "git (mark it 'git')" in text


GROUPED = """
import pytest

def test_node(node_cluster):
    pass

@pytest.mark.breaks_node
def test_breaks_the_node(node_cluster):
    pass

@pytest.mark.image
def test_image_only():
    pass

@pytest.mark.node
def test_own_cluster():
    pass

def test_integration(stack_crd):
    pass
"""


def test_the_hosts_tests_run_in_four_groups(pytester: pytest.Pytester) -> None:
    """A session node's test is ``host``; one breaking it ``host-faults``; the rest ``host-own``."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_grouped=GROUPED)
    result = pytester.runpytest_inprocess("--collect-only", "-q", "-p", "no:cacheprovider")
    items = {
        i.name: i
        for i in result.reprec.getcalls("pytest_collection_finish")[0].session.items  # type: ignore[attr-defined]
    }
    groups = {name: [m.args for m in i.iter_markers("xdist_group")] for name, i in items.items()}
    assert groups == {
        "test_node": [("host",)],
        "test_breaks_the_node": [("host-faults",)],
        "test_image_only": [("host-own",)],
        "test_own_cluster": [("host-own",)],
        "test_integration": [],
    }


SCENARIO = """
import pytest

@pytest.mark.node
def test_under_the_pod_runner(request):
    request.getfixturevalue("node_cluster")
"""


def test_a_test_uses_the_session_node_by_name_or_as_a_pod_runner_scenario(
    pytester: pytest.Pytester,
) -> None:
    """``node_cluster`` among its fixtures, or an e2e scenario in ``host-pods``; no other."""
    from tests.tiers import uses_session_node  # noqa: PLC0415 - the plugin's own import

    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_grouped=GROUPED)
    pytester.mkpydir("e2e")
    (pytester.path / "e2e" / "test_scenario.py").write_text(SCENARIO)
    result = pytester.runpytest_inprocess("--collect-only", "-q", "-p", "no:cacheprovider")
    session = result.reprec.getcalls("pytest_collection_finish")[0].session  # type: ignore[attr-defined]
    uses = {i.name: uses_session_node(i) for i in session.items}
    assert uses == {
        "test_node": True,
        "test_breaks_the_node": True,
        "test_image_only": False,
        "test_own_cluster": False,
        "test_integration": False,
        "test_under_the_pod_runner": True,
    }


HOST_TESTS = """
import os
from pathlib import Path

import pytest

@pytest.mark.parametrize("n", range(6))
def test_node(node_cluster, n):
    Path(f"ran-{n}").write_text(os.environ["PYTEST_XDIST_WORKER"])

@pytest.mark.parametrize("n", range(6))
def test_unit(n):
    pass
"""


@pytest.mark.usefixtures("repo_on_path")
def test_under_xdist_the_hosts_tests_run_on_one_worker(pytester: pytest.Pytester) -> None:
    """With ``--dist loadgroup`` every node test runs on the same worker, one at a time."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_host=HOST_TESTS)
    result = pytester.runpytest_subprocess(
        "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=12)
    workers = {(pytester.path / f"ran-{n}").read_text() for n in range(6)}
    assert len(workers) == 1, workers


def test_xdist_hands_the_groups_out_before_any_other_work() -> None:
    """Groups go ahead of modules (largest first, as added); a re-added group stays ahead."""
    from tests.tiers import _GroupsFirstQueue  # noqa: PLC0415 - the queue alone

    queue = _GroupsFirstQueue()
    scopes = ("t.py::a", "host", "t.py::b[x@y]", "host-pods", "u.py::c")  # as xdist adds them
    for scope in scopes:
        queue[scope] = {scope: False}
    assert list(queue) == ["host", "host-pods", "t.py::a", "t.py::b[x@y]", "u.py::c"]
    taken = queue.popitem(last=False)  # a worker takes the first unit
    assert taken[0] == "host"
    queue.update({"host": {}})  # a crashed worker's unit made available again
    assert list(queue)[:2] == ["host", "host-pods"]
