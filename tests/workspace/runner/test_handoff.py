"""The checkout's hand-off to a run started beside it: two real processes, one workspace."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from workspace.runner.handoff import DONE, LOCK, Handed, Handoff

CHECKOUT = """\
import pathlib, sys, time
from workspace.runner.handoff import Handoff
workspace = pathlib.Path(sys.argv[1])
with Handoff(workspace).checking_out():
    (workspace / "holding").touch()
    while not (workspace / "go").exists():
        time.sleep(0.01)
    (workspace / "results").write_text("checked out")
"""


def start_checkout(workspace: Path) -> subprocess.Popen[bytes]:
    """A checkout process holding the hand-off until ``go`` appears in ``workspace``."""
    return subprocess.Popen([sys.executable, "-c", CHECKOUT, str(workspace)])


def waiting(handoff: Handoff, stop: threading.Event) -> tuple[threading.Thread, list[Handed]]:
    """A thread waiting on ``handoff``; its result lands in the list."""
    found: list[Handed] = []
    thread = threading.Thread(target=lambda: found.append(handoff.wait(stop)), daemon=True)
    thread.start()
    return thread, found


def wait_for_file(path: Path, proc: subprocess.Popen[bytes]) -> None:
    """Until ``path`` exists (``proc`` still running)."""
    stop = threading.Event()
    while not path.exists():
        assert proc.poll() is None, "the checkout process ended early"
        stop.wait(0.01)


def test_the_run_waits_for_a_checkout_started_before_or_after_it(tmp_path: Path) -> None:
    """The wait begins before the checkout exists and ends once its results are complete."""
    handoff = Handoff(tmp_path)
    thread, found = waiting(handoff, threading.Event())  # nothing there yet
    checkout = start_checkout(tmp_path)
    wait_for_file(tmp_path / "holding", checkout)
    (tmp_path / "go").touch()
    thread.join(60)
    assert found == [Handed.FINISHED]
    assert (tmp_path / "results").read_text() == "checked out"  # it waited for them
    assert checkout.wait(60) == 0


def test_a_checkout_killed_midway_is_abandoned(tmp_path: Path) -> None:
    """SIGKILL (an OOM kill) releases the lock with no DONE: the run does not wait on."""
    checkout = start_checkout(tmp_path)
    wait_for_file(tmp_path / "holding", checkout)
    thread, found = waiting(Handoff(tmp_path), threading.Event())
    os.kill(checkout.pid, signal.SIGKILL)
    checkout.wait(60)
    thread.join(60)
    assert found == [Handed.ABANDONED]
    assert not (tmp_path / DONE).exists()


def test_a_checkout_that_raises_is_abandoned(tmp_path: Path) -> None:
    """An exception out of the checkout's block leaves its results incomplete."""
    handoff = Handoff(tmp_path)
    with pytest.raises(RuntimeError), handoff.checking_out():
        raise RuntimeError
    assert handoff.wait(threading.Event()) is Handed.ABANDONED


def test_a_checkout_that_ended_before_the_run_is_taken_at_once(tmp_path: Path) -> None:
    """An init container's (or the agent runner's) checkout: finished before the wait."""
    handoff = Handoff(tmp_path)
    with handoff.checking_out():
        pass
    assert (tmp_path / LOCK).exists()
    assert handoff.wait(threading.Event()) is Handed.FINISHED


@pytest.mark.parametrize("checkout_is", ["not-started", "holding"])
def test_a_stop_ends_the_wait(tmp_path: Path, checkout_is: str) -> None:
    """Stopped (the pod deleted) before the checkout started or while it holds the lock."""
    checkout = start_checkout(tmp_path) if checkout_is == "holding" else None
    if checkout is not None:
        wait_for_file(tmp_path / "holding", checkout)
    stop = threading.Event()
    thread, found = waiting(Handoff(tmp_path), stop)
    stop.set()
    thread.join(60)
    assert found == [Handed.STOPPED]
    if checkout is not None:
        (tmp_path / "go").touch()
        assert checkout.wait(60) == 0
