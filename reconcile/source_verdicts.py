"""The verdicts about a Stack's program source: waiting for it, refused, unreachable.

Role: what the Stack says when the source of a run (a git remote, a Flux artifact, a
Program) is not there yet (``source_not_ready``: waiting, not a failure), can never be
fetched as written (``source_refused``, and ``source_reason`` for a source failure), or did
not answer (``source_unreachable`` before a run is announced, ``not_started_retrying``
after: a failed attempt, so that the run is not announced again before the backoff).
Built on the shapes of ``reconcile.verdict``.
"""

from __future__ import annotations

import re
from typing import Final

from reconcile.policy import Policy
from reconcile.verdict import Conditions, Notice, Shape, Verdict, stalled
from status.conditions import Reason
from workspace.source import SourceFailure

SOURCE_RETRY_MESSAGE: Final = "The source is unreachable; retrying with backoff"


def not_started_retrying(
    message: str, previous_failures: int, *, fresh: bool, retry_after: float
) -> Verdict:
    """An announced run could not start for now (its source did not answer): retried.

    It counts as a failed attempt, like ``not_started``, so that the next pass waits for
    the failures' backoff (``decide``) instead of announcing the run again at once: this
    pass's own status writes come back as watch events, which would otherwise start it
    again before any backoff. Reconciling (``ProgressingWithRetry``), never Stalled.
    """
    return Verdict(
        conditions=Conditions(
            Shape.RETRYING, Reason.SOURCE_UNAVAILABLE, steady(message), SOURCE_RETRY_MESSAGE
        ),
        event=Notice(Reason.SOURCE_UNAVAILABLE, steady(message), on_change=True),
        requeue_after=retry_after,
        failures=1 if fresh else previous_failures + 1,
        handles_request=True,
        ends_run=True,
    )


def source_not_ready(message: str, policy: Policy) -> Verdict:
    """A Flux source or Program is missing or not ready: wait (not a failure).

    Its informer brings the change that ends the wait; ``wait_poll`` is the safety net.
    The status and the Event are written once, on the change, not on every look.
    """
    return Verdict(
        conditions=Conditions(Shape.WAITING, Reason.SOURCE_NOT_READY, message),
        event=Notice(Reason.SOURCE_NOT_READY, message, on_change=True),
        requeue_after=policy.wait_poll,
    )


def source_reason(failure: SourceFailure) -> Reason:
    """The condition reason of a source failure."""
    if failure is SourceFailure.AUTHENTICATION_FAILED:
        return Reason.AUTHENTICATION_FAILED
    if failure is SourceFailure.ARTIFACT_DIGEST_MISMATCH:
        return Reason.ARTIFACT_DIGEST_MISMATCH
    if failure is SourceFailure.ARTIFACT_UNSAFE:
        return Reason.ARTIFACT_UNSAFE
    return Reason.SOURCE_UNAVAILABLE


def source_refused(failure: SourceFailure, message: str, policy: Policy) -> Verdict:
    """The source refused for good (credentials, unknown revision): Stalled, polled."""
    return stalled(source_reason(failure), message, requeue_after=policy.wait_poll)


_ELAPSED = re.compile(
    r"\s*after \d+ (?:ms|milliseconds?|seconds?)"
    r"|\s*with \d+ (?:out of \d+ )?bytes received",
    re.IGNORECASE,
)
"""What git and curl say of an attempt's timing ("after 3012 ms"): different every time."""


def steady(message: str) -> str:
    """``message`` without the timing of the attempt it is about.

    A retried verdict that wrote each attempt's own timing would be rewritten on every
    retry, and each write comes back as a watch event that starts the next pass at once.
    """
    return _ELAPSED.sub("", message)


def source_unreachable(message: str, *, say_so: bool) -> Verdict:
    """The source is unreachable for now: retry with the queue's backoff.

    ``say_so``: write it (a run was announced, or the Stack is not Ready for its
    generation); a Stack Ready for its generation keeps that status, since what is
    deployed did not change because a poll of its branch failed.
    """
    conditions = None
    if say_so:
        conditions = Conditions(
            Shape.RETRYING, Reason.SOURCE_UNAVAILABLE, steady(message), SOURCE_RETRY_MESSAGE
        )
    return Verdict(
        conditions=conditions, retry_error=f"source unavailable: {message}", ends_run=True
    )
