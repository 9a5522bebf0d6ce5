"""``bench.spawned``: a peer's process, stopped with SIGTERM and then its group's SIGKILL."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench import spawned
from bench.spawned import Spawned, log_tail
from testbed.waits import wait_for

# Prints "ready", then ignores SIGTERM (as a peer busy in a run might) until killed.
STUBBORN = """
import signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.alarm(120)
print("ready", flush=True)
signal.pause()
"""


def test_a_process_that_ignores_sigterm_is_killed_and_then_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``stop`` ends it after ``STOP_TIMEOUT``; ``pid`` then raises with the log's tail."""
    monkeypatch.setattr(spawned, "STOP_TIMEOUT", 0.5)
    process = Spawned("the stubborn peer", tmp_path / "logs" / "peer.log")
    process.spawn([sys.executable, "-c", STUBBORN], {}, tmp_path)
    wait_for(lambda: log_tail(process.log) == "ready", "the peer to start", timeout=30)
    assert process.pid > 0
    process.stop()
    with pytest.raises(RuntimeError, match="the stubborn peer exited; its log ends:\nready"):
        _ = process.pid
    process.stop()  # safe twice


def test_before_it_is_spawned_it_has_no_pid_and_no_log(tmp_path: Path) -> None:
    """``pid`` raises before ``spawn``, and ``stop`` does nothing."""
    process = Spawned("the peer", tmp_path / "peer.log")
    with pytest.raises(RuntimeError, match=r"the peer exited; its log ends:\n\(no log\)"):
        _ = process.pid
    process.stop()
