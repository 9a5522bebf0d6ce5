"""Stopping an operation: SIGINT first, then (after the grace) the CLI's whole tree dies."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from testbed.pulumi_env import PulumiEnv
from tests.workspace.runner.support import (
    ArgvSpy,
    alive,
    descendants,
    lock_files,
    run,
    slow_step_running,
    succeeded,
    wait_for,
)
from workspace.runner import ErrorKind, LocalRunner, Outcome, UpdateRequest

pytestmark = pytest.mark.pulumi


def run_in_thread(
    runner: LocalRunner, request: UpdateRequest, stop: threading.Event
) -> tuple[threading.Thread, list[Outcome]]:
    """Start ``runner.run`` in a thread; the outcome lands in the returned list."""
    result: list[Outcome] = []
    thread = threading.Thread(target=lambda: result.append(run(runner, request, stop)))
    thread.start()
    return thread, result


def test_stop_interrupts_a_slow_update_cleanly(
    runner: LocalRunner,
    make_request: Callable[..., UpdateRequest],
    pulumi_env: PulumiEnv,
) -> None:
    """Stop during an update: INTERRUPTED, the lock released, and the next update works."""
    stop = threading.Event()
    thread, result = run_in_thread(runner, make_request({"delay": "10"}), stop)
    wait_for(lambda: slow_step_running(pulumi_env))
    stopped_at = time.monotonic()

    stop.set()
    thread.join(timeout=90)

    assert not thread.is_alive()
    assert time.monotonic() - stopped_at < 60
    (outcome,) = result
    assert outcome.error is ErrorKind.INTERRUPTED
    assert "interrupted" in outcome.message
    assert lock_files(pulumi_env) == []
    assert succeeded(run(runner, make_request()))


def test_stop_before_start_runs_nothing(
    runner: LocalRunner, make_request: Callable[..., UpdateRequest], argv_spy: ArgvSpy
) -> None:
    """With stop already set, the outcome is INTERRUPTED and no CLI was started."""
    stop = threading.Event()
    stop.set()

    outcome = run(runner, make_request(), stop)

    assert outcome.error is ErrorKind.INTERRUPTED
    assert "before `pulumi stack select` started" in outcome.message
    assert argv_spy.argvs == []


def test_interrupt_grace_kills_the_cli_and_its_stale_lock_can_be_cleared(
    pulumi_env: PulumiEnv,
    make_request: Callable[..., UpdateRequest],
    target: Path,
) -> None:
    """After the grace the CLI's tree is killed; its lock is stale, cleared, and up works."""
    runner = LocalRunner(pulumi_env.command(), pulumi_env.home, interrupt_grace=0.5)
    stop = threading.Event()
    thread, result = run_in_thread(runner, make_request({"delay": "10"}), stop)
    # In the step's sleep: SIGINT alone cannot end the CLI within 0.5 s.
    wait_for(lambda: slow_step_running(pulumi_env))
    cli: int = json.loads(lock_files(pulumi_env)[0].read_text())["pid"]
    plugins = descendants(cli)

    stop.set()
    thread.join(timeout=60)

    (outcome,) = result
    assert outcome.error is ErrorKind.INTERRUPTED
    (lock,) = lock_files(pulumi_env)
    assert json.loads(lock.read_text())["pid"] == cli
    assert plugins, "the update's plugins were not found"
    # No orphaned plugin: each got SIGKILL, which takes effect within moments.
    wait_for(lambda: not any(alive(pid) for pid in [cli, *plugins]), timeout=10)
    assert runner.clear_stale_lock(make_request())
    assert lock_files(pulumi_env) == []
    assert succeeded(run(runner, make_request({"content": "after the kill"})))
    assert target.read_text() == "after the kill"
