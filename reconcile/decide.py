"""Whether a Stack needs a Pulumi run now, from its status and what was observed: pure logic.

A run is due, in this order, when:

1. ``status.currentUpdate`` is set: an update was running when the operator stopped, so it
   is resumed (never a stale Reconciling after a restart);
2. the Stack's generation has not been applied (``lastUpdate.generation``);
3. a reconcile request (annotation) has not been handled;
4. the source's commit differs from the last attempted one (a push to a tracked branch, or
   an edited ``commit``);
5. the last attempt was interrupted (operator shutdown) — at once;
6. the last attempt failed and its backoff (``base · 2^(failures-1)``, capped by
   ``retryMaxBackoffDurationSeconds``) has passed — unless the failure cap was reached, or
   the failure was one that needs a change (the run left the Stack Stalled with a reason
   in ``reconcile.policy.STALLED_BY_A_RUN``), in which case nothing runs until one of 2-4
   happens; a lock held by another update (``UpdateConflict``) is looked at again every
   ``wait_poll`` instead;
7. ``continueResyncOnCommitMatch`` is set and a resync period has passed since the last run.

Otherwise nothing is due and the answer says when to look again (the next branch poll or
resync), or never (a pinned commit with nothing else to do).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

from controller.clock import parse_time
from reconcile.policy import STALLED_BY_A_RUN, Policy, backoff, poll_period
from reconcile.spec import StackSpec
from status.conditions import STALLED, Reason, get_condition

NEW_GENERATION, REQUESTED, NEW_COMMIT = "new generation", "reconcile requested", "new commit"
RESUME, INTERRUPTED, RETRY, RESYNC = "resume", "interrupted", "retry", "resync"
FRESH_REASONS = frozenset({NEW_GENERATION, REQUESTED, NEW_COMMIT})


OURS = "pulumi.com/reconciliation-request"
FLUX = "reconcile.fluxcd.io/requestedAt"


@dataclasses.dataclass(frozen=True, slots=True)
class Requests:
    """The two reconcile-request annotations; each is handled through its own status field.

    ``pulumi.com/reconciliation-request`` ↔ ``status.observedReconcileRequest`` (the Pulumi
    operator's handshake); ``reconcile.fluxcd.io/requestedAt`` ↔
    ``status.lastHandledReconcileAt`` (Flux's, which ``flux reconcile`` waits on).
    """

    ours: str | None = None
    flux: str | None = None

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> Requests:
        """Read both annotations of an object."""
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        return cls(annotations.get(OURS) or None, annotations.get(FLUX) or None)

    def pending(self, status: Mapping[str, Any]) -> bool:
        """True when either annotation holds a value its status field does not."""
        ours = self.ours is not None and self.ours != status.get("observedReconcileRequest")
        flux = self.flux is not None and self.flux != status.get("lastHandledReconcileAt")
        return ours or flux

    def mark_handled(self, status: dict[str, Any]) -> None:
        """Record both values as handled (call with the final conditions, in one write)."""
        if self.ours is not None:
            status["observedReconcileRequest"] = self.ours
        if self.flux is not None:
            status["lastHandledReconcileAt"] = self.flux

    @property
    def label(self) -> str | None:
        """A short description for lastUpdate/currentUpdate."""
        return self.ours or self.flux


@dataclasses.dataclass(frozen=True, slots=True)
class Observed:
    """What the reconciler saw this pass."""

    generation: int
    status: Mapping[str, Any]
    requests: Requests
    commit: str  # the commit the source resolves to now
    now: datetime.datetime


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    """Run now (``why`` set), or look again after ``requeue_after`` seconds (None: never)."""

    why: str | None = None
    requeue_after: float | None = None
    exhausted: bool = False  # nothing due because the failure cap was reached

    @property
    def due(self) -> bool:
        """True when a run should start now."""
        return self.why is not None

    @property
    def fresh(self) -> bool:
        """True when the run is for something new, so earlier failures no longer count."""
        return self.why in FRESH_REASONS


def decide(spec: StackSpec, observed: Observed, policy: Policy) -> Decision:
    """Apply the rules of the module docstring."""
    status, last = observed.status, observed.status.get("lastUpdate") or {}
    if status.get("currentUpdate"):
        return Decision(RESUME)
    if last.get("generation") != observed.generation:
        return Decision(NEW_GENERATION)
    if observed.requests.pending(status):
        return Decision(REQUESTED)
    if last.get("lastAttemptedCommit") != observed.commit:
        return Decision(NEW_COMMIT)
    if last.get("state") == "failed":
        return _after_failure(spec, observed, policy, last)
    return _after_success(spec, observed, last)


def _after_failure(
    spec: StackSpec, observed: Observed, policy: Policy, last: Mapping[str, Any]
) -> Decision:
    if last.get("interrupted"):
        return Decision(INTERRUPTED)
    if _stalled_by_the_run(observed.status):
        return Decision(requeue_after=poll_period(spec))
    failures = int(last.get("failures") or 0)
    if failures >= policy.max_update_failures:
        return Decision(requeue_after=poll_period(spec), exhausted=True)
    ended = parse_time(last.get("lastResyncTime")) or observed.now
    wait = _retry_wait(last, failures, spec, policy) - (observed.now - ended).total_seconds()
    return Decision(RETRY) if wait <= 0 else Decision(requeue_after=wait)


def _retry_wait(last: Mapping[str, Any], failures: int, spec: StackSpec, policy: Policy) -> float:
    """Seconds between the end of the last attempt and the next.

    A lock held by another update is looked at again every ``wait_poll``: it is not a
    failure, and a look is an announced run (two status writes and an Event), so the
    failures' backoff, which a conflict does not raise, would make it a loop.
    """
    if last.get("reason") == Reason.UPDATE_CONFLICT:
        return policy.wait_poll
    return backoff(failures, spec, policy)


def _stalled_by_the_run(status: Mapping[str, Any]) -> bool:
    """The last run's failure stalled the Stack: retrying the same inputs cannot help.

    ``lastUpdate`` says so (its ``stalled`` and ``reason``), whatever verdict about the
    run's inputs has been shown since; one written before it recorded them is judged by
    the Stalled condition.
    """
    last = status.get("lastUpdate") or {}
    if "stalled" in last:
        return bool(last["stalled"]) and last.get("reason") in STALLED_BY_A_RUN
    stalled = get_condition(status, STALLED)
    return (
        stalled is not None
        and stalled.get("status") == "True"
        and stalled.get("reason") in STALLED_BY_A_RUN
    )


def _after_success(spec: StackSpec, observed: Observed, last: Mapping[str, Any]) -> Decision:
    if not spec.continue_resync_on_commit_match:
        return Decision(requeue_after=poll_period(spec))
    ended = parse_time(last.get("lastResyncTime")) or observed.now
    wait = spec.resync_frequency_seconds - (observed.now - ended).total_seconds()
    return Decision(RESYNC) if wait <= 0 else Decision(requeue_after=wait)
