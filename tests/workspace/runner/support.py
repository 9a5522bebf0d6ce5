"""Helpers shared by the runner's tests: progress logs, process and lock inspection, waiting."""

from __future__ import annotations

import json
import subprocess
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

from testbed import waits
from testbed.pulumi_env import PulumiEnv
from tests.e2e.waits import pending
from workspace import process
from workspace.runner import ErrorKind, LocalRunner, Outcome, Progress, UpdateRequest

STACK = "dev"
# Random per run, so that finding one anywhere means it leaked.
SECRET_VALUE = f"s3cret-{uuid.uuid4().hex}"
TOKEN_VALUE = f"tok-{uuid.uuid4().hex}"


class ProgressLog:
    """Collects progress reports (from the event follower's thread)."""

    def __init__(self) -> None:
        """Start empty."""
        self.reports: list[Progress] = []

    def __call__(self, progress: Progress) -> None:
        """Record one report."""
        self.reports.append(progress)


def run(
    runner: LocalRunner, request: UpdateRequest, stop: threading.Event | None = None
) -> Outcome:
    """Run one operation with a fresh stop event (or the given one)."""
    return runner.run(request, on_progress=ProgressLog(), stop=stop or threading.Event())


def succeeded(outcome: Outcome) -> bool:
    """Whether an outcome succeeded; shows the message in the assertion when not."""
    assert outcome.error is ErrorKind.NONE, outcome.message
    return outcome.succeeded


def lock_files(pulumi_env: PulumiEnv) -> list[Path]:
    """The ``dev`` stack's lock files in the backend (project ``files``)."""
    locks = pulumi_env.backend_dir / ".pulumi" / "locks" / "organization" / "files" / STACK
    return sorted(locks.glob("*.json"))


def wait_for(condition: Callable[[], bool], timeout: float = 60) -> None:
    """Poll until ``condition`` holds, failing the test after ``timeout`` seconds."""
    waits.wait_for(condition, "the condition", timeout, interval=0.05)


def proc_stat(pid: str | int) -> list[str]:
    """``/proc/<pid>/stat`` after the command name: state, ppid, pgrp, ...; [] if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return []


def cmdline(pid: int) -> bytes:
    """The command line of ``pid`` (empty if it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (zombies, which nobody reaps here, are dead)."""
    stat = proc_stat(pid)
    return bool(stat) and stat[0] not in ("Z", "X")


def descendants(root: int) -> list[int]:
    """The pids of every process below ``root`` (``workspace.process``'s own walk)."""
    return [pid for pid, _ in process.descendants(root)]


def sleeping(pid: int) -> bool:
    """Whether a thread of ``pid`` is in ``time.sleep`` (the kernel's nanosleep)."""
    for wchan in Path(f"/proc/{pid}/task").glob("*/wchan"):
        try:
            if "nanosleep" in wchan.read_text():
                return True
        except OSError:
            continue  # the thread exited
    return False


def slow_step_running(pulumi_env: PulumiEnv) -> bool:
    """Whether an update of ``dev`` has its dynamic provider inside a step's ``delay``.

    The checkpoint records the ``file`` step as pending (the engine writes that before it
    calls the provider); the lock names the CLI; the provider is its descendant running
    ``pulumi.dynamic``, with a thread in nanosleep: ``delay`` is a ``time.sleep`` in the
    provider's create or update, its first statement. (A thread in nanosleep alone is not
    enough: the provider's own threads sleep too, before any step has begun.)
    """
    if not pending(pulumi_env.backend_dir, STACK):
        return False
    for lock in lock_files(pulumi_env):  # afresh: a short command before ``up`` may hold one
        try:
            cli: int = json.loads(lock.read_text())["pid"]
        except (OSError, ValueError):
            continue  # released, or still being written
        for pid in descendants(cli):
            if b"pulumi.dynamic" in cmdline(pid) and sleeping(pid):
                return True
    return False


class ArgvSpy:
    """Records the argv of every Popen, and scans /proc for a value while armed."""

    def __init__(self, value: str) -> None:
        """Look for ``value``."""
        self.value = value
        self.argvs: list[list[str]] = []
        self.proc_hits: list[str] = []
        self._real = subprocess.Popen
        self._stop = threading.Event()
        self._scanner = threading.Thread(target=self._scan, daemon=True)

    def popen(self, args: Any, *rest: Any, **kwargs: Any) -> subprocess.Popen[Any]:
        """Stand-in for ``subprocess.Popen``."""
        self.argvs.append([str(arg) for arg in args])
        return self._real(args, *rest, **kwargs)

    def __enter__(self) -> Self:
        """Start scanning /proc."""
        self._scanner.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop scanning."""
        self._stop.set()
        self._scanner.join()

    def _scan(self) -> None:
        needle = self.value.encode()
        while not self._stop.wait(0.01):
            for path in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    if needle in path.read_bytes():
                        self.proc_hits.append(str(path))
                except OSError:
                    continue  # the process exited


def subcommands(argvs: list[list[str]]) -> list[tuple[str, ...]]:
    """The pulumi subcommand of each recorded argv: ``("up",)``, ``("config", "set")``."""
    found: list[tuple[str, ...]] = []
    for argv in argvs:
        if Path(argv[0]).name != "pulumi":
            continue
        words = [arg for arg in argv[1:] if not arg.startswith("-")]
        found.append(tuple(words[:2]) if words[0] in ("stack", "config") else (words[0],))
    return found
