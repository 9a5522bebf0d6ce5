"""The ``Runner`` interface: what the reconciler asks of whatever runs Pulumi for it.

Implementations: ``LocalRunner`` runs the CLI as a child of the operator. A runner that runs
each operation elsewhere (in a pod) implements the same methods; ``prepare``, ``attach`` and
``locks`` are the parts where the two differ most. ``JobRunner`` is what the runners that
take the reconciler's ``RunJob`` (the pod runner, the agent runner) share: ``run``,
``destroy`` and ``prepare`` over one ``_operate``.
"""

from __future__ import annotations

import abc
import dataclasses
import threading
from dataclasses import dataclass
from typing import ClassVar, Protocol

from workspace.runner.job import RunJob
from workspace.runner.types import (
    LockInfo,
    Operation,
    Outcome,
    ProgressCallback,
    RunResult,
    UpdateRequest,
)


@dataclass(frozen=True, slots=True)
class RunnerTraits:
    """What a runner needs of the reconciler: the one place the runner choice shows.

    ``takes_job``: the request carries a ``RunJob`` (references, never a secret value)
    and the runner lays the source out itself; else the reconciler checks the source out
    and hands over the work directory and the secret values. ``outlives_operator``: a
    run goes on when the operator stops (``Detached``), so a restarted operator attaches
    to it instead of concluding it as interrupted, and a deposed leader has no run of
    its own to stop. ``in_pods``: runs are pods in the Stack's namespace, as its
    ServiceAccount: the account is checked, the tenancy rules for run pods apply, and
    each namespace has its own dependency cache.
    """

    takes_job: bool = False
    outlives_operator: bool = False
    in_pods: bool = False


class Runner(Protocol):
    """Runs Pulumi operations for Stacks; one operation per stack at a time.

    Every operation returns an ``Outcome`` (never raises for a failed run: the failure is
    classified in ``Outcome.error``); ``stop`` interrupts it (the outcome then says so).
    A runner whose runs outlive the operator returns ``Detached`` instead when ``stop`` says
    the operator is stopping (``StopSignal.cause == "shutdown"``): the run goes on.
    No method raises for a Pulumi or backend failure; programming errors may raise.
    ``traits`` says what the runner needs of the reconciler.
    """

    traits: ClassVar[RunnerTraits]

    def run(
        self, request: UpdateRequest, *, on_progress: ProgressCallback, stop: threading.Event
    ) -> RunResult:
        """Optionally refresh, then ``up`` (or ``preview`` when ``request.preview``).

        Prepares the workspace first (see ``prepare``). With ``request.refresh`` an ``up``
        is preceded by a refresh (``REFRESH_CHANGES`` on drift with
        ``expect_no_refresh_changes``); a preview never writes state. ``on_progress`` is
        called from other threads, at most once a second per step plus once at its end.
        """
        ...

    def destroy(
        self, request: UpdateRequest, *, on_progress: ProgressCallback, stop: threading.Event
    ) -> RunResult:
        """Destroy the stack's resources and remove the stack; a missing stack succeeds."""
        ...

    def clear_stale_lock(self, request: UpdateRequest) -> bool:
        """Release the stack's lock if a dead run of this operator left it; True if it did.

        Only a lock provably left by a dead run is released; a lock the runner cannot
        judge is left alone (False).
        """
        ...

    def cancel(self, request: UpdateRequest) -> bool:
        """Cancel the stack's update in flight (known to be dead); False if that failed."""
        ...

    def prepare(self, request: UpdateRequest) -> Outcome | None:
        """Make the request's workspace ready for ``run``; None when it is.

        Checks the project, makes the Stack's ``PULUMI_HOME``, selects the stack (creating
        it unless ``use_local_stack_only``) and writes its config. On failure, the
        ``Outcome`` that ``run`` would have returned for it. ``run`` prepares by itself:
        calling this first is optional (to check a new source early). A remote runner may
        do nothing here and return None.
        """
        ...

    def attach(
        self,
        request: UpdateRequest,
        *,
        on_progress: ProgressCallback | None = None,
        stop: threading.Event | None = None,
    ) -> RunResult | None:
        """The outcome of the stack's operation that was in flight when the operator restarted.

        A runner whose operations outlive the operator (a pod) waits for that operation
        (reporting its progress) and returns its outcome; None when there is none to
        attach to. ``LocalRunner``'s operations die with the operator: it always returns
        None.
        """
        ...

    def locks(self, request: UpdateRequest) -> list[LockInfo] | None:
        """Who holds the stack's backend lock now: one entry per lock, oldest first.

        ``[]`` when the stack is not locked; None when this runner cannot see the
        backend's locks (only ``file://`` backends keep them where a runner can read them).
        """
        ...


class JobRunner(abc.ABC):
    """A runner that takes the request's ``RunJob`` and lays its own source out.

    Guarantees: ``run`` runs ``up`` (``preview`` when asked) and ``destroy`` runs
    ``destroy``, each through ``_operate`` with the request's job; ``prepare`` prepares
    nothing here, and the backend's locks are not read or released here either: the job's
    own process (the agent) does both. A request without a job is a programming
    error: ``ValueError``, naming the runner.
    """

    def run(
        self, request: UpdateRequest, *, on_progress: ProgressCallback, stop: threading.Event
    ) -> RunResult:
        """Run ``up`` (or ``preview``) for the request's job and return its outcome."""
        operation: Operation = "preview" if request.preview else "up"
        return self._operate(self._job(request), operation, on_progress, stop)

    def destroy(
        self, request: UpdateRequest, *, on_progress: ProgressCallback, stop: threading.Event
    ) -> RunResult:
        """Run ``destroy`` for the request's job and return its outcome."""
        return self._operate(self._job(request), "destroy", on_progress, stop)

    def prepare(self, request: UpdateRequest) -> Outcome | None:
        """None: the job's own process prepares its workspace."""
        del request
        return None

    def locks(self, request: UpdateRequest) -> list[LockInfo] | None:
        """None: the backend is the job's process's to read."""
        del request
        return None

    def clear_stale_lock(self, request: UpdateRequest) -> bool:
        """False: the job's agent releases a lock an earlier run of the Stack left."""
        del request
        return False

    def cancel(self, request: UpdateRequest) -> bool:
        """False: the job's agent releases a lock an earlier run of the Stack left."""
        del request
        return False

    @abc.abstractmethod
    def _operate(
        self,
        job: RunJob,
        operation: Operation,
        on_progress: ProgressCallback,
        stop: threading.Event,
    ) -> RunResult:
        """Run ``operation`` for ``job`` to its outcome (or what the runner returns for it)."""

    def _job(self, request: UpdateRequest) -> RunJob:
        if request.job is None:
            name = type(self).__name__
            msg = f"{name} needs UpdateRequest.job (the runner's traits say takes_job)"
            raise ValueError(msg)
        if request.trace is None:
            return request.job
        return dataclasses.replace(request.job, trace=request.trace)
