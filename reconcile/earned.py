"""The status a Stack's last run earned, and the way back to it once a later verdict ends.

Role: a verdict about a run's inputs — its source not ready or refused, a Program that does
not render, a Secret or ConfigMap missing, a prerequisite not Ready, its ServiceAccount
refused — replaces the conditions the Stack's last run earned, while ``lastUpdate`` stays as
that run left it. When the cause is mended and nothing is due (the revision is the one
already applied), the Stack returns to the status that run earned, in one write and with no
run (status contract rule 29). ``returned`` gives the verdict that does it, or None when the
Stack shows that status already.

Guarantees:

- ``earned`` rebuilds the run's conditions from ``lastUpdate`` alone (its ``state``,
  ``reason``, ``stalled``, ``message``, ``failures``, ``type``, ``lastResyncTime`` and
  ``lastAttemptedCommit``) with the functions the run's own verdict used, so the messages
  are the run's own; a retry's time is the one ``decide`` waits for.
- A ``lastUpdate`` written before it recorded ``reason`` gives nothing for a failed run
  (its verdict cannot be known), and the conditions of a successful one.
- Pure: no API call, no clock (times come from the status).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.clock import parse_time
from reconcile.policy import Policy, backoff
from reconcile.spec import StackSpec
from reconcile.verdict import (
    Conditions,
    Notice,
    Shape,
    Verdict,
    applied,
    exhausted_message,
    retrying,
    waiting_for_lock,
)
from status import conditions as cond
from status.conditions import Reason


def earned(status: Mapping[str, Any], spec: StackSpec, policy: Policy) -> Conditions | None:
    """The conditions the run ``status.lastUpdate`` records earned; None if unknown."""
    last = status.get("lastUpdate") or {}
    message = str(last.get("message") or "")
    if last.get("state") == "succeeded":
        return applied(message, str(last.get("lastAttemptedCommit") or ""))
    reason = _reason(last.get("reason"))
    if last.get("state") != "failed" or reason is None:
        return None
    return _failed(last, reason, spec, policy)


def _failed(
    last: Mapping[str, Any], reason: Reason, spec: StackSpec, policy: Policy
) -> Conditions | None:
    """The conditions a failed run (``last``, its ``reason``) earned."""
    message = str(last.get("message") or "")
    failures, operation = int(last.get("failures") or 0), str(last.get("type") or "up")
    if last.get("stalled"):
        if reason is Reason.RETRIES_EXHAUSTED:
            message = exhausted_message(operation, failures, message)
        return Conditions(Shape.STALLED, reason, message)
    if reason is Reason.UPDATE_CONFLICT:
        return waiting_for_lock(message)
    if failures >= policy.max_update_failures:  # the cap was lowered since
        exhausted = exhausted_message(operation, failures, message)
        return Conditions(Shape.STALLED, Reason.RETRIES_EXHAUSTED, exhausted)
    ended = parse_time(last.get("lastResyncTime"))
    if ended is None:
        return None
    return retrying(reason, message, failures, ended, backoff(failures, spec, policy))


def shows(status: Mapping[str, Any], conditions: Conditions) -> bool:
    """Whether ``status`` already shows ``conditions``' verdict (its reason and shape)."""
    stalled = cond.get_condition(status, cond.STALLED) is not None
    return shown_reason(status) == conditions.reason and stalled == (
        conditions.shape is Shape.STALLED
    )


def shown_reason(status: Mapping[str, Any]) -> str | None:
    """The reason a status shows: Stalled's when present, else Ready's."""
    headline = cond.get_condition(status, cond.STALLED) or cond.get_condition(status, cond.READY)
    return None if headline is None else headline.get("reason")


def returned(status: Mapping[str, Any], spec: StackSpec, policy: Policy) -> Verdict | None:
    """The verdict that returns the Stack to what its last run earned; None: it shows that.

    Its Event (once, on the change) says which verdict ended and what stands again.
    """
    conditions = earned(status, spec, policy)
    if conditions is None or shows(status, conditions):
        return None
    before = shown_reason(status) or "the previous verdict"
    message = f"{before} is over; the last update's result stands: {conditions.message}"
    return Verdict(conditions=conditions, event=Notice(conditions.reason, message, on_change=True))


def _reason(value: Any) -> Reason | None:  # noqa: ANN401 - a status field, any JSON
    """``value`` as a condition reason of ours; None for anything else."""
    try:
        return Reason(value)
    except ValueError:
        return None
