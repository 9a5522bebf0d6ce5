"""The verdicts about a Stack being deleted: its destroy runs, is blocked, or is done.

Role: what the Stack says while ``destroyOnFinalize`` destroys its stack (``destroying``),
when the destroy could not run or failed (``deletion_blocked``: the finalizer stays and the
destroy is tried again after the failures' backoff, ``DestroyRetry``), and what a finished
destroy's outcome means (``of_destroy``). Built on the shapes of ``reconcile.verdict``.
"""

from __future__ import annotations

import dataclasses
import datetime

from reconcile.verdict import (
    DESTROYED,
    Conditions,
    Notice,
    Shape,
    Verdict,
    concluded,
    summary,
    update_result,
)
from status import conditions as cond
from status.conditions import Reason
from workspace.runner import Outcome


def destroying(finalizer: str) -> Verdict:
    """``destroyOnFinalize``: the destroy is about to run."""
    message = f'Destroying the stack\'s resources before removing finalizer "{finalizer}"'
    return Verdict(
        conditions=Conditions(Shape.DELETING, Reason.DESTROYING, message, ready="Unknown")
    )


def deletion_blocked(why: str, finalizer: str, retry: DestroyRetry) -> Verdict:
    """The destroy could not run or failed: the finalizer stays; retried with backoff.

    Like a failed run's, the retry waits ``retry.wait`` seconds (the failures' backoff),
    which ``lastUpdate`` records so that no pass in between destroys again: each of this
    verdict's own writes comes back as a watch event at once.
    """
    way_out = (
        f'The finalizer "{finalizer}" stays until the stack is destroyed; to abandon its '
        "resources instead, set spec.destroyOnFinalize to false or remove the finalizer"
    )
    at = cond.now_rfc3339(retry.now + datetime.timedelta(seconds=retry.wait))
    message = f"{why}. Attempt {retry.failures} failed; retrying at {at}. {way_out}"
    return Verdict(
        conditions=Conditions(Shape.DELETING, Reason.DELETION_BLOCKED, message, ready="False"),
        event=Notice(Reason.DELETION_BLOCKED, f"{why}. {way_out}"),
        requeue_after=retry.wait,
        failures=retry.failures,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class DestroyRetry:
    """When a blocked deletion's destroy is tried again.

    The ``failures``-th attempt in a row failed at ``now``; the next one waits ``wait``
    seconds.
    """

    failures: int
    wait: float
    now: datetime.datetime


def of_destroy(
    outcome: Outcome, deadline: float | None, finalizer: str, retry: DestroyRetry
) -> Verdict:
    """The verdict on a finished destroy: ``Destroyed``, or ``DeletionBlocked`` (``retry``)."""
    result = update_result(outcome)
    recorded = concluded(outcome, deadline)
    if not recorded.succeeded:
        blocked = deletion_blocked(f"destroy failed: {recorded.message}", finalizer, retry)
        return dataclasses.replace(blocked, update_result=result)
    return Verdict(event=Notice(DESTROYED, summary(recorded)), update_result=result)
