"""What the reconciler does about what happened: one pure verdict per situation.

Every situation a reconcile pass ends in — a run's outcome, or a reason not to run —
is judged here, and only here, into a ``Verdict``:

- ``conditions``: which ``status.conditions`` helper to apply, with its reason and
  message (None: write no conditions);
- ``event``: the Event to post (its type follows from its reason, ``EVENTS``: Warning
  exactly for failures), and whether only when the reason changes;
- ``requeue_after``, or ``retry_error`` (fail the pass: the queue retries with backoff);
- for runs: ``failures`` (the count ``status.lastUpdate.failures`` records) and
  ``update_result`` (the ``result`` label of the update duration metric);
- ``handles_request``: the verdict is final, so the pass's reconcile request is recorded
  as handled with it (status contract rule 17); ``ends_run``: it concludes the run in
  flight (``currentUpdate`` and ``progress`` go).

A run's failure is classified by its kind: ``ProgramInvalid`` and ``StackNotFound`` stall
at once (``NEEDS_A_CHANGE``: no retry can mend them), and so does a
``DependencyInstallFailed`` whose install can never work as written (``STALLING_KINDS``;
one whose registry did not answer is retried); other failures are retried after the
policy's backoff until ``max_update_failures`` in a row, then stall ``RetriesExhausted``; a
lock held by another update (``UpdateConflict``) is waited for, without counting as a
failure; an operator shutdown (``Interrupted``) is resumed at the next start. A run
stopped at its deadline is a failure (``UpdateTimedOut``).

Callers (``reconcile.effects``) only execute verdicts; nothing else classifies. The
verdicts about a program source that is missing, refused or unreachable live beside this
module, in ``reconcile.source_verdicts``, built from its shapes.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from collections.abc import Mapping
from typing import Any

from controller.clock import parse_time
from reconcile.policy import NEEDS_A_CHANGE, Policy, backoff, poll_period, resync_period
from reconcile.sources import revision_text
from reconcile.spec import StackSpec
from status import conditions as cond
from status.conditions import Reason
from status.events import NORMAL, WARNING
from workspace.runner import ErrorKind, Outcome

UPDATE_STARTED, DESTROYED = "UpdateStarted", "Destroyed"  # Event reasons, not condition ones
EVENTS: Mapping[str, str] = {
    UPDATE_STARTED: NORMAL,
    Reason.SUCCEEDED: NORMAL,
    DESTROYED: NORMAL,
    Reason.UPDATE_CONFLICT: NORMAL,
    Reason.DEPENDENCY_NOT_READY: NORMAL,
    Reason.SOURCE_NOT_READY: NORMAL,
    **dict.fromkeys(
        (
            Reason.UPDATE_FAILED,
            Reason.PREVIEW_FAILED,
            Reason.REFRESH_DRIFT,
            Reason.INTERRUPTED,
            Reason.UPDATE_TIMED_OUT,
            Reason.INVALID_SPEC,
            Reason.SECRET_NOT_FOUND,
            Reason.CONFIG_MAP_NOT_FOUND,
            Reason.SOURCE_UNAVAILABLE,
            Reason.AUTHENTICATION_FAILED,
            Reason.ARTIFACT_DIGEST_MISMATCH,
            Reason.ARTIFACT_UNSAFE,
            Reason.PROGRAM_INVALID,
            Reason.STACK_NOT_FOUND,
            Reason.RETRIES_EXHAUSTED,
            Reason.DELETION_BLOCKED,
            Reason.RUNNER_FAILED,
            Reason.DEPENDENCY_INSTALL_FAILED,
        ),
        WARNING,
    ),
}
"""Every Event reason the reconciler posts, with its type: Warning exactly for failures."""


SUCCEEDED, FAILED, INTERRUPTED, CONFLICT = "succeeded", "failed", "interrupted", "conflict"
SUSPENDED_MESSAGE = "Suspended: no Pulumi runs while spec.suspend is true"
INTERRUPTED_MESSAGE = "Interrupted by an operator shutdown; it resumes when the operator restarts"
DELETING_MESSAGE = "Interrupted: the Stack is being deleted; its finalizer runs next"

_KIND_REASONS = {
    ErrorKind.STACK_NOT_FOUND: Reason.STACK_NOT_FOUND,
    ErrorKind.PROGRAM_INVALID: Reason.PROGRAM_INVALID,
    ErrorKind.REFRESH_CHANGES: Reason.REFRESH_DRIFT,
    ErrorKind.RUNNER_FAILED: Reason.RUNNER_FAILED,
    ErrorKind.SOURCE_FAILED: Reason.SOURCE_UNAVAILABLE,
    ErrorKind.DEPENDENCIES_FAILED: Reason.DEPENDENCY_INSTALL_FAILED,
    ErrorKind.DEPENDENCIES_INVALID: Reason.DEPENDENCY_INSTALL_FAILED,
}
STALLING_KINDS = frozenset({ErrorKind.DEPENDENCIES_INVALID})
"""Failures of a run that stall it at once although their reason may also be retried."""


class Shape(enum.Enum):
    """Which ``status.conditions`` helper a verdict applies."""

    PROGRESSING = "progressing"
    SUCCEEDED = "succeeded"
    RETRYING = "retrying"
    WAITING = "waiting"
    STALLED = "stalled"
    DELETING = "deleting"


@dataclasses.dataclass(frozen=True, slots=True)
class Conditions:
    """The conditions a verdict writes: ``shape``'s helper with these arguments.

    ``retry_message`` is Reconciling's message of ``RETRYING`` (Ready says ``message``);
    ``ready`` is Ready's status for ``WAITING`` and ``DELETING``.
    """

    shape: Shape
    reason: Reason
    message: str
    retry_message: str = ""
    ready: str = "False"

    @property
    def headline(self) -> str:
        """The condition whose reason names the state: Stalled when stalled, else Ready."""
        return cond.STALLED if self.shape is Shape.STALLED else cond.READY

    def apply(
        self, status: Mapping[str, Any], generation: int, now: datetime.datetime
    ) -> dict[str, Any]:
        """``status`` with these conditions for ``generation``, transitions at ``now``."""
        reason, message = self.reason, self.message
        match self.shape:
            case Shape.PROGRESSING:
                return cond.progressing(status, generation, message, now)
            case Shape.SUCCEEDED:
                return cond.succeeded(status, generation, message, now)
            case Shape.RETRYING:
                return cond.retrying(status, generation, reason, message, self.retry_message, now)
            case Shape.WAITING:
                return cond.waiting(status, generation, reason, message, now, ready=self.ready)
            case Shape.STALLED:
                return cond.stalled(status, generation, reason, message, now)
            case Shape.DELETING:
                return cond.deleting(status, generation, reason, message, now, ready=self.ready)


@dataclasses.dataclass(frozen=True, slots=True)
class Notice:
    """An Event to post; ``on_change``: only when the headline condition's reason changes."""

    reason: str
    message: str
    on_change: bool = False

    @property
    def type_(self) -> str:
        """``Normal`` or ``Warning``, from ``EVENTS``."""
        return EVENTS[self.reason]


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    """What to do about one situation (see the module docstring)."""

    conditions: Conditions | None = None
    event: Notice | None = None
    requeue_after: float | None = None
    retry_error: str | None = None
    failures: int | None = None
    update_result: str = ""  # empty unless the verdict is on a Pulumi operation
    handles_request: bool = False
    ends_run: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class RunFacts:
    """What a run's verdict is judged from besides the policy and the spec.

    ``outcome`` is the runner's; ``deadline`` the run's deadline in seconds when it
    stopped the run (None: it did not); ``now`` the wall time the run is concluded at;
    ``deleting`` says the Stack's deletion interrupted it; ``stopped`` that the operator
    stopped the run (its shutdown, the deadline or the deletion): an interruption it did
    not ask for is the runner's failure (see ``attributed``).
    """

    outcome: Outcome
    previous_failures: int
    fresh: bool
    commit: str
    now: datetime.datetime
    deadline: float | None = None
    deleting: bool = False
    stopped: bool = True


# -- runs ------------------------------------------------------------------------------


def summary(outcome: Outcome) -> str:
    """One line saying what a successful operation changed."""
    changes = ", ".join(f"{op} {n}" for op, n in sorted(outcome.resource_changes.items()) if n)
    return f"pulumi {outcome.operation} succeeded ({changes or 'no changes'})"


def update_result(outcome: Outcome) -> str:
    """The update metric's ``result`` label for the runner's ``outcome``."""
    if outcome.succeeded:
        return SUCCEEDED
    if outcome.error is ErrorKind.INTERRUPTED:
        return INTERRUPTED
    if outcome.error is ErrorKind.CONFLICT:
        return CONFLICT
    return FAILED


def attributed(outcome: Outcome, *, stopped: bool) -> Outcome:
    """``outcome`` with an interruption the operator did not ask for made a runner failure.

    Something else stopped the run (a node drain, an eviction, a user deleting its run pod):
    that is ``RUNNER_FAILED``, retried with backoff, and the runner's message says what.
    """
    if stopped or outcome.error is not ErrorKind.INTERRUPTED:
        return outcome
    return dataclasses.replace(outcome, error=ErrorKind.RUNNER_FAILED)


def recorded(facts: RunFacts) -> Outcome:
    """The run's outcome as ``lastUpdate`` and ``history`` record it, and as it is judged."""
    return concluded(attributed(facts.outcome, stopped=facts.stopped), facts.deadline)


def concluded(outcome: Outcome, deadline: float | None) -> Outcome:
    """``outcome`` as it is recorded: a run stopped at its ``deadline`` is a failure saying so."""
    if deadline is None or outcome.succeeded:  # it may have finished just as the deadline passed
        return outcome
    message = (
        f"pulumi {outcome.operation} ran longer than its deadline of {deadline:.0f}s "
        "(spec.timeoutSeconds, else the operator's --run-timeout; at most its "
        "--max-run-timeout) and was interrupted"
    )
    return dataclasses.replace(outcome, error=ErrorKind.UPDATE_FAILED, message=message)


def failures_after(outcome: Outcome, previous: int, *, fresh: bool) -> int:
    """The consecutive failures to record after ``outcome`` (a conflict does not count)."""
    if outcome.succeeded:
        return 0
    if outcome.error is ErrorKind.CONFLICT:
        return 0 if fresh else previous
    return 1 if fresh else previous + 1


def failure_reason(outcome: Outcome, *, timed_out: bool) -> Reason:
    """The condition reason of a failed run (not a conflict, not an interruption)."""
    if timed_out:
        return Reason.UPDATE_TIMED_OUT
    known = _KIND_REASONS.get(outcome.error)
    if known is not None:
        return known
    return Reason.PREVIEW_FAILED if outcome.operation == "preview" else Reason.UPDATE_FAILED


def of_run(facts: RunFacts, spec: StackSpec, policy: Policy) -> Verdict:
    """The verdict on a finished run (see the module docstring).

    Every ``ErrorKind`` is judged; a run left going (``Detached``) is not an outcome and
    never reaches a verdict.
    """
    outcome = recorded(facts)
    failures = failures_after(outcome, facts.previous_failures, fresh=facts.fresh)
    conclusion = Verdict(
        failures=failures,
        update_result=update_result(attributed(facts.outcome, stopped=facts.stopped)),
        handles_request=True,
        ends_run=True,
    )
    if outcome.succeeded:
        done = summary(outcome)
        return dataclasses.replace(
            conclusion,
            conditions=applied(done, facts.commit),
            event=Notice(Reason.SUCCEEDED, done),
            requeue_after=resync_period(spec),
        )
    if outcome.error is ErrorKind.INTERRUPTED:  # shutting down (or deleted): it resumes
        message = DELETING_MESSAGE if facts.deleting else INTERRUPTED_MESSAGE
        event = "Update interrupted: the Stack is being deleted" if facts.deleting else None
        return dataclasses.replace(
            conclusion,
            conditions=Conditions(Shape.RETRYING, Reason.INTERRUPTED, message, message),
            event=Notice(Reason.INTERRUPTED, event or "Update interrupted by shutdown"),
        )
    if outcome.error is ErrorKind.CONFLICT:
        return dataclasses.replace(
            conclusion,
            conditions=waiting_for_lock(outcome.message),
            event=Notice(Reason.UPDATE_CONFLICT, outcome.message, on_change=True),
            requeue_after=policy.wait_poll,
        )
    return _failed(conclusion, outcome, facts, spec, policy)


def _failed(
    conclusion: Verdict, outcome: Outcome, facts: RunFacts, spec: StackSpec, policy: Policy
) -> Verdict:
    """``conclusion`` with the conditions, Event and requeue of a failed run."""
    failures = conclusion.failures or 0
    reason = failure_reason(outcome, timed_out=facts.deadline is not None)
    event, requeue_after = Notice(reason, outcome.message), poll_period(spec)
    if reason in NEEDS_A_CHANGE or outcome.error in STALLING_KINDS:
        conditions = Conditions(Shape.STALLED, reason, outcome.message)
    elif failures >= policy.max_update_failures:
        message = exhausted_message(outcome.operation, failures, outcome.message)
        conditions = Conditions(Shape.STALLED, Reason.RETRIES_EXHAUSTED, message)
        event = Notice(Reason.RETRIES_EXHAUSTED, outcome.message)
    else:
        requeue_after = backoff(failures, spec, policy)
        conditions = retrying(reason, outcome.message, failures, facts.now, requeue_after)
    return dataclasses.replace(
        conclusion, conditions=conditions, event=event, requeue_after=requeue_after
    )


def applied(done: str, commit: str) -> Conditions:
    """The conditions of a successful run at ``commit`` (``done``: its ``summary``)."""
    return Conditions(Shape.SUCCEEDED, Reason.SUCCEEDED, f"{done} at {revision_text(commit)}")


def waiting_for_lock(message: str) -> Conditions:
    """The conditions of a run that found the stack locked by another update (``message``)."""
    text = f"Waiting for another update to finish: {message}"
    return Conditions(Shape.WAITING, Reason.UPDATE_CONFLICT, text)


def exhausted_message(operation: str, failures: int, last_error: str) -> str:
    """Stalled's message once ``failures`` failures in a row reached the cap."""
    return (
        f"{operation} failed {failures} times in a row; not retrying until the "
        f"Stack, its source or a reconcile request changes. Last error: {last_error}"
    )


def retrying(
    reason: Reason, message: str, failures: int, ended: datetime.datetime, wait: float
) -> Conditions:
    """The conditions of the ``failures``-th failure in a row, ended at ``ended``: retried."""
    at = cond.now_rfc3339(ended + datetime.timedelta(seconds=wait))
    return Conditions(
        Shape.RETRYING, reason, message, f"Attempt {failures} failed; retrying at {at}"
    )


def orphaned_outcome(current: Mapping[str, Any], operation: str, now: datetime.datetime) -> Outcome:
    """The outcome of a run a gone operator instance left (``current``: its currentUpdate).

    Nobody saw it end: it counts as interrupted at ``now``, from its recorded start.
    """
    started = parse_time(current.get("startTime")) or now
    operator = current.get("operator") or "another operator instance"
    message = (
        f"The update started by {operator} never finished: that operator instance stopped "
        "without concluding it (its pod was deleted or crashed, or its node was lost); "
        "running it again"
    )
    return Outcome(
        operation=str(current.get("type") or operation),  # type: ignore[arg-type]
        succeeded=False,
        error=ErrorKind.INTERRUPTED,
        message=message,
        outputs={},
        resource_changes={},
        permalink=None,
        started=started,
        ended=now,
    )


def orphaned(outcome: Outcome) -> Verdict:
    """A run a gone instance left is concluded as Interrupted before it runs again.

    Ready False (Interrupted), still Reconciling, an ``Interrupted`` Warning Event; the
    failure count is not raised (the program did not fail).
    """
    return Verdict(
        conditions=Conditions(
            Shape.RETRYING, Reason.INTERRUPTED, outcome.message, "Running the update again"
        ),
        event=Notice(Reason.INTERRUPTED, outcome.message),
        update_result=INTERRUPTED,
        ends_run=True,
    )


def run_started(operation: str, commit: str, generation: int, note: str = "") -> Verdict:
    """A due run is about to start: Progressing, and an ``UpdateStarted`` Event.

    ``note`` (e.g. a deadline the operator cut) follows the message when given.
    """
    at = revision_text(commit)
    message = f"Running pulumi {operation} at {at} (generation {generation})"
    if note:
        message = f"{message}; {note}"
    return Verdict(
        conditions=Conditions(Shape.PROGRESSING, Reason.PROGRESSING, message),
        event=Notice(UPDATE_STARTED, message),
    )


def with_trace(verdict: Verdict, trace_id: str | None) -> Verdict:
    """``verdict`` with its Event's message naming the run's trace (when there is one)."""
    if trace_id is None or verdict.event is None:
        return verdict
    event = dataclasses.replace(
        verdict.event, message=f"{verdict.event.message} (trace {trace_id})"
    )
    return dataclasses.replace(verdict, event=event)


def not_started(reason: Reason, message: str, previous_failures: int, *, fresh: bool) -> Verdict:
    """An announced run could not start (its source or ``spec.repoDir`` failed): a stall.

    It counts as a failed attempt, so the next pass does not announce it again: an
    ``InvalidSpec`` waits for a change (``NEEDS_A_CHANGE``); a source that cannot be
    fetched is retried with the failures' backoff, up to the cap (see ``decide``).
    """
    return dataclasses.replace(
        stalled(reason, message),
        failures=1 if fresh else previous_failures + 1,
        ends_run=True,
    )


# -- before a run ----------------------------------------------------------------------


def stalled(reason: Reason, message: str, *, requeue_after: float | None = None) -> Verdict:
    """Nothing can succeed until the Stack or what it references changes: Stalled."""
    return Verdict(
        conditions=Conditions(Shape.STALLED, reason, message),
        event=Notice(reason, message, on_change=True),
        requeue_after=requeue_after,
        handles_request=True,
    )


def invalid_spec(message: str) -> Verdict:
    """The spec cannot be applied as written: Stalled until it changes."""
    return stalled(Reason.INVALID_SPEC, message)


def account_refused(message: str, policy: Policy) -> Verdict:
    """The Stack's ServiceAccount may not run it (yet): Stalled, and look again every poll.

    An admin's label on the ServiceAccount mends it without a change to the Stack.
    """
    return stalled(Reason.INVALID_SPEC, message, requeue_after=policy.wait_poll)


def suspended() -> Verdict:
    """``spec.suspend``: no runs; Reconciling, Ready Unknown (the spec is not applied)."""
    return Verdict(
        conditions=Conditions(Shape.WAITING, Reason.SUSPENDED, SUSPENDED_MESSAGE, ready="Unknown")
    )


def dependency_not_ready(message: str, policy: Policy) -> Verdict:
    """A prerequisite Stack is not Ready: wait, looking again every ``wait_poll``."""
    return Verdict(
        conditions=Conditions(Shape.WAITING, Reason.DEPENDENCY_NOT_READY, message),
        event=Notice(Reason.DEPENDENCY_NOT_READY, message, on_change=True),
        requeue_after=policy.wait_poll,
    )


def secret_not_found(
    message: str,
    status: Mapping[str, Any],
    now: datetime.datetime,
    policy: Policy,
    reason: Reason = Reason.SECRET_NOT_FOUND,
) -> Verdict:
    """A referenced Secret or key is missing: Stalled, and look for it again soon.

    ``reason`` is ``ConfigMapNotFound`` for a ``configRef`` ConfigMap, read the same way.

    Secrets are not watched (a watch needs list on every Secret of the namespace, the power
    to read them all); instead the look is repeated soon after the Stack stalls and then
    less often: as long as it has been stalled (per ``status``, before this verdict), from
    1 s to ``wait_poll``.
    """
    since = cond.get_condition(status, cond.STALLED) or {}
    stalled_at = parse_time(since.get("lastTransitionTime"))
    elapsed = (now - stalled_at).total_seconds() if stalled_at else 0.0
    poll = min(policy.wait_poll, max(1.0, elapsed))
    return stalled(reason, message, requeue_after=poll)


def exhausted(status: Mapping[str, Any], requeue_after: float | None) -> Verdict:
    """The failure cap is reached and nothing is due: say so once (e.g. the cap was lowered)."""
    if cond.get_condition(status, cond.STALLED) is not None:
        return Verdict(requeue_after=requeue_after)
    last = status.get("lastUpdate") or {}
    message = (
        f"Retries exhausted; not retrying until a change. Last error: {last.get('message', '')}"
    )
    return stalled(Reason.RETRIES_EXHAUSTED, message, requeue_after=requeue_after)
