"""Waiting on the operator in end-to-end tests: conditions and positive controls, no fixed sleeps.

A test that must show that something did NOT happen first waits for evidence that it
would have happened by now, then looks:

- ``wait_reconciles``: the operator finished more reconciles. A reconcile ends only after
  the run it started has concluded, so once reconciles that began after the moment of
  interest have ended, a run they should not have started would already show (in the
  status, the history, the managed file). With ``--max-concurrent-reconciles-per-namespace``
  at its default of 1 (two workers), one namespace's reconciles run one at a time.
- a marker: a later action whose effect is visible (a reconcile request the status must
  acknowledge, an Event the recorder must post after the ones queued before it).

``wait_update_locked`` waits until a live ``pulumi up`` holds a lock on a ``file://``
backend; ``wait_mid_step`` until an update is inside a resource's create or update (the
stack's checkpoint records the operation as pending while the provider works on it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from testbed.operator import Operator
from testbed.waits import wait_for
from tests.status.invariants import Observation

POLL = 0.2  # seconds between two looks


def wait_until(check: Callable[[], bool], what: str, timeout: float) -> None:
    """Poll ``check`` every ``POLL`` s until it holds; fail naming ``what`` otherwise.

    ``testbed.waits.wait_for`` under the name the end-to-end tests call.
    """
    wait_for(check, what, timeout, interval=POLL)


def reconciles(metrics: str) -> float:
    """``controller_runtime_reconcile_total`` summed over its labels."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(metrics)
        if family.name == "controller_runtime_reconcile"
        for sample in family.samples
        if sample.name.endswith("_total")
    )


def wait_reconciles(operator: Operator, count: int, timeout: float = 60) -> None:
    """Wait until the operator has finished ``count`` more reconciles than when called.

    With one reconcile of a namespace at a time, all but the first of them began after
    this call, and each ended after any run it started.
    """
    start = reconciles(operator.metrics())
    wait_until(
        lambda: reconciles(operator.metrics()) - start >= count,
        f"{count} more reconciles (the E2E resync period is 2 s)",
        timeout,
    )


def locks(backend: Path) -> list[Path]:
    """The lock files on a ``file://`` backend."""
    return list(backend.glob(".pulumi/locks/**/*.json"))


def held_by_up(lock: Path) -> bool:
    """Whether ``lock`` names a live process whose command line is ``pulumi up ...``."""
    try:
        pid = json.loads(lock.read_text())["pid"]
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError, KeyError):
        return False  # released, still being written, or its process is gone
    command = [arg for arg in argv[1:] if arg and not arg.startswith(b"-")]
    return command[:1] == [b"up"]


def wait_update_locked(backend: Path, timeout: float = 60) -> None:
    """Wait until a running ``pulumi up`` holds a lock on ``backend``.

    ``status.currentUpdate`` is written before the CLI starts, and creating a stack takes
    a lock for a moment too, so a test that needs the CLI inside its update waits for the
    lock of a live ``up`` process.
    """
    wait_until(
        lambda: any(held_by_up(lock) for lock in locks(backend)),
        f"a pulumi up to lock {backend}",
        timeout,
    )


def checkpoint(backend: Path, stack: str, project: str = "files") -> dict[str, Any]:
    """The ``latest`` deployment of a stack's checkpoint on a ``file://`` backend ({} if none)."""
    path = backend / ".pulumi" / "stacks" / project / f"{stack}.json"
    try:
        latest = json.loads(path.read_text())["checkpoint"].get("latest")
    except (OSError, ValueError, KeyError):
        return {}  # not written yet, or being rewritten
    return dict(latest or {})


def pending(backend: Path, stack: str) -> list[str]:
    """``<type> <resource name>`` of each operation the stack's checkpoint records as pending."""
    operations = checkpoint(backend, stack).get("pending_operations") or []
    return [f"{op['type']} {op['resource']['urn'].rsplit('::', 1)[-1]}" for op in operations]


def wait_mid_step(backend: Path, stack: str, operation: str, timeout: float = 60) -> None:
    """Wait until the stack's checkpoint records ``operation`` (e.g. ``creating file``) pending.

    The engine records an operation as pending before the provider starts it and clears it
    when the provider returns, so a process killed now leaves a half-done update.
    """
    wait_until(
        lambda: operation in pending(backend, stack),
        f"{operation!r} pending in the checkpoint of {stack}",
        timeout,
    )


def status_writes(versions: Iterable[Observation], before: Observation) -> list[str]:
    """The resourceVersions, among ``versions``, whose status differs from the one before."""
    writes, last = [], before.obj.get("status")
    for version in versions:
        if version.obj.get("status") != last:
            writes.append(version.resource_version)
        last = version.obj.get("status")
    return writes
