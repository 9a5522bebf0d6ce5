"""Run one Pulumi operation under its deadline, once more after releasing a dead lock.

``Operator.run``, ``Operator.destroy`` and ``Operator.attach`` (to a run a gone instance of
the operator left going) are the one way runs are operated: each gives the runner a stop
event of the run's own (``reconcile.deadline.RunStop``: the operator's stop, the Stack's
deletion, or the deadline passing) and returns the runner's ``Outcome`` with what stopped
it, or the runner's ``Detached`` (the operator stops; the run goes on and nothing is
concluded). When the stack's lock is held (``CONFLICT``) by a dead update of this operator
— a stale lock the runner can clear, or (``orphaned``) the update a gone instance left —
the lock is released and the operation runs once more. The verdict is not made here.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable

import structlog

from controller.clock import Clock
from reconcile.deadline import RunStop
from workspace.runner import (
    Detached,
    ErrorKind,
    Outcome,
    Progress,
    Runner,
    RunResult,
    UpdateRequest,
)

log = structlog.get_logger(__name__)

ProgressCallback = Callable[[Progress], None]
Operation = Callable[..., RunResult | None]


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One operation to run.

    ``timeout`` is its deadline in seconds; ``orphaned`` says that the Stack's last update
    was left by a gone instance of this operator (its lock may be released).
    """

    request: UpdateRequest
    timeout: float
    orphaned: bool = False


@dataclasses.dataclass(frozen=True)
class Operated:
    """An operation's outcome and what stopped it, if anything.

    ``deadline`` is set when the deadline stopped it, ``deleting`` when the Stack's
    deletion did; ``stopped`` when the operator stopped it for any reason (its shutdown,
    the deadline, the deletion).
    """

    outcome: Outcome
    deadline: float | None = None
    deleting: bool = False  # the Stack's deletion interrupted it
    stopped: bool = False


class Operator:
    """Runs operations through ``runner``; deadlines are measured on ``clock.now()``."""

    def __init__(self, runner: Runner, clock: Clock) -> None:
        """Run through ``runner``, timing deadlines with ``clock``."""
        self._runner, self._clock = runner, clock

    def run(
        self,
        attempt: Attempt,
        on_progress: ProgressCallback,
        stop: threading.Event,
        interrupt: threading.Event | None = None,
    ) -> Operated | Detached:
        """Refresh if asked, then ``up`` or ``preview`` (see the module docstring).

        ``interrupt`` (set when the Stack is being deleted) stops it like its deadline.
        """
        return _ran(self._operate(self._runner.run, attempt, on_progress, stop, interrupt))

    def destroy(self, attempt: Attempt, stop: threading.Event) -> Operated | Detached:
        """Destroy the stack's resources and remove the stack (see the module docstring)."""
        return _ran(self._operate(self._runner.destroy, attempt, lambda _p: None, stop))

    def attach(
        self,
        attempt: Attempt,
        on_progress: ProgressCallback,
        stop: threading.Event,
        interrupt: threading.Event | None = None,
    ) -> Operated | Detached | None:
        """Follow the run a gone instance left to its outcome; None when there is none."""
        return self._operate(self._runner.attach, attempt, on_progress, stop, interrupt)

    def _operate(
        self,
        operation: Operation,
        attempt: Attempt,
        on_progress: ProgressCallback,
        stop: threading.Event,
        interrupt: threading.Event | None = None,
    ) -> Operated | Detached | None:
        request = attempt.request
        run_stop = RunStop(stop, attempt.timeout, clock=self._clock, interrupt=interrupt)
        with run_stop:
            outcome = operation(request, on_progress=on_progress, stop=run_stop.event)
            conflict = isinstance(outcome, Outcome) and outcome.error is ErrorKind.CONFLICT
            if conflict and self._release_dead_lock(request, orphaned=attempt.orphaned):
                outcome = operation(request, on_progress=on_progress, stop=run_stop.event)
        if outcome is None or isinstance(outcome, Detached):
            return outcome
        deadline = attempt.timeout if run_stop.timed_out else None
        stopped = run_stop.event.is_set()
        return Operated(outcome, deadline, deleting=run_stop.interrupted, stopped=stopped)

    def _release_dead_lock(self, request: UpdateRequest, *, orphaned: bool) -> bool:
        """Release the stack's lock if a dead update of this operator holds it."""
        if self._runner.clear_stale_lock(request):
            log.warning("Cleared a stale lock left by a dead update of this operator")
            return True
        if orphaned and self._runner.cancel(request):
            log.warning("Cancelled the update a gone instance of this operator left locked")
            return True
        return False


def _ran(operated: Operated | Detached | None) -> Operated | Detached:
    """``operated``; a runner's ``run`` and ``destroy`` always give a result."""
    if operated is None:
        msg = "the runner returned no result for an operation it ran"
        raise TypeError(msg)
    return operated
