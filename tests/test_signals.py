"""The signal guard fails a test that leaves SIGINT or SIGTERM ignored or blocked, and undoes it."""

from __future__ import annotations

import signal

import pytest

pytest_plugins = ("pytester",)

CONFTEST = 'pytest_plugins = ("tests.signals",)\n'
TESTS = """
import signal
import subprocess
import sys

CHILD = "import signal; print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"

def test_leaves_sigint_ignored():
    signal.signal(signal.SIGINT, signal.SIG_IGN)

def test_leaves_sigterm_blocked():
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])

def test_restores_what_it_changed():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGINT, previous)

def test_a_later_child_hears_sigint_again():
    child = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True)
    assert child.stdout.strip() == "False"
    assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
"""


@pytest.mark.usefixtures("repo_on_path")
def test_a_test_leaving_a_signal_deaf_fails_and_the_next_starts_clean(
    pytester: pytest.Pytester,
) -> None:
    """The two culprits error at teardown naming the signal; the others pass."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_culprits=TESTS)

    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")

    result.assert_outcomes(passed=4, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_leaves_sigint_ignored*",
            "*the test left its worker with SIGINT ignored*",
            "*ERROR at teardown of test_leaves_sigterm_blocked*",
            "*the test left its worker with SIGTERM blocked*",
        ]
    )


HEARS = """
import signal, subprocess, sys
CHILD = "import signal; print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"
def test_a_child_hears_sigint():
    child = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True)
    assert child.stdout.strip() == "False"
"""


@pytest.mark.parametrize(
    ("conftest", "outcome"), [(CONFTEST, "passed"), ("", "failed")], ids=["guarded", "control"]
)
@pytest.mark.usefixtures("repo_on_path")
def test_a_run_started_ignoring_sigint_hears_it_again(
    pytester: pytest.Pytester, conftest: str, outcome: str
) -> None:
    """Started as a script's background job (SIGINT ignored), the tests' children hear it.

    The control run, without the plugin, shows the children would inherit the deafness.
    """
    pytester.makeconftest(conftest)
    pytester.makepyfile(test_child=HEARS)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run's process inherits it
    try:
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    finally:
        signal.signal(signal.SIGINT, previous)

    result.assert_outcomes(**{outcome: 1})
