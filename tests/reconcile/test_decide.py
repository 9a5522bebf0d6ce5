"""decide() says when a Stack needs a run, and otherwise when to look again."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from reconcile.decide import Observed, Requests, decide
from reconcile.policy import Policy, backoff
from reconcile.spec import StackSpec, parse_spec

NOW = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)
POLICY = Policy(retry_base_delay=10, max_update_failures=3)


def spec(**fields: Any) -> StackSpec:
    """A branch-tracking spec with overrides."""
    base: dict[str, Any] = {
        "stack": "dev",
        "projectRepo": "git://example.invalid/r.git",
        "branch": "main",
    }
    return parse_spec({**base, **fields}, "ns")


def last(**fields: Any) -> dict[str, Any]:
    """A lastUpdate for generation 2 at commit c1, ended a minute ago."""
    base = {
        "state": "succeeded",
        "generation": 2,
        "lastAttemptedCommit": "c1",
        "lastResyncTime": "2026-01-01T11:59:00Z",
        "failures": 0,
    }
    return {**base, **fields}


def observe(status: dict[str, Any], *, commit: str = "c1", request: str | None = None) -> Observed:
    """Observed state at generation 2 (``request``: our reconcile-request annotation)."""
    return Observed(generation=2, status=status, requests=Requests(request), commit=commit, now=NOW)


@pytest.mark.parametrize(
    ("status", "kwargs", "why"),
    [
        pytest.param({}, {}, "new generation", id="never-run"),
        pytest.param({"lastUpdate": last(generation=1)}, {}, "new generation", id="spec-changed"),
        pytest.param({"lastUpdate": last()}, {"commit": "c2"}, "new commit", id="pushed"),
        pytest.param(
            {"lastUpdate": last()}, {"request": "r1"}, "reconcile requested", id="request"
        ),
        pytest.param(
            {"lastUpdate": last(), "currentUpdate": {"generation": 2}}, {}, "resume", id="restart"
        ),
        pytest.param(
            {"lastUpdate": last(state="failed", failures=1, interrupted=True)},
            {},
            "interrupted",
            id="interrupted",
        ),
        pytest.param(
            {"lastUpdate": last(state="failed", failures=1, lastResyncTime="2026-01-01T11:59:49Z")},
            {},
            "retry",
            id="backoff-elapsed",
        ),
    ],
)
def test_runs_are_due(status: dict[str, Any], kwargs: dict[str, Any], why: str) -> None:
    """Each trigger makes a run due with its reason."""
    decision = decide(spec(), observe(status, **kwargs), POLICY)
    assert decision.why == why


def test_handled_request_is_not_due_again() -> None:
    """A request already recorded in status does not trigger another run."""
    status = {"lastUpdate": last(), "observedReconcileRequest": "r1"}
    assert not decide(spec(), observe(status, request="r1"), POLICY).due


def test_idle_branch_tracking_stack_polls_at_the_resync_period() -> None:
    """Up to date: nothing due, look again after resyncFrequencySeconds."""
    decision = decide(spec(resyncFrequencySeconds=120), observe({"lastUpdate": last()}), POLICY)
    assert (decision.due, decision.requeue_after) == (False, 120)


def test_pinned_commit_without_resync_never_polls() -> None:
    """A commit-pinned, up-to-date Stack needs no timer at all."""
    sha = "c1" * 20
    pinned = spec(branch=None, commit=sha)
    status = {"lastUpdate": last(lastAttemptedCommit=sha)}
    decision = decide(pinned, observe(status, commit=sha), POLICY)
    assert (decision.due, decision.requeue_after) == (False, None)


def test_failed_run_waits_for_its_backoff() -> None:
    """After the 2nd failure the wait is 20 s from the end of the attempt."""
    status = {"lastUpdate": last(state="failed", failures=2, lastResyncTime="2026-01-01T11:59:50Z")}
    decision = decide(spec(), observe(status), POLICY)
    assert not decision.due
    assert decision.requeue_after == pytest.approx(10)


def test_failure_cap_stops_retries_until_something_changes() -> None:
    """At the cap nothing is due (exhausted); a new commit makes it due again."""
    status = {"lastUpdate": last(state="failed", failures=3, lastResyncTime="2026-01-01T10:00:00Z")}
    exhausted = decide(spec(), observe(status), POLICY)
    assert (exhausted.due, exhausted.exhausted) == (False, True)
    assert decide(spec(), observe(status, commit="c2"), POLICY).fresh


@pytest.mark.parametrize("reason", ["ProgramInvalid", "StackNotFound", "DependencyInstallFailed"])
def test_a_run_that_stalled_is_not_retried_until_something_changes(reason: str) -> None:
    """ProgramInvalid, StackNotFound, a lockfile out of step: no retry on backoff; a push runs."""
    stalled = {"type": "Stalled", "status": "True", "reason": reason, "message": "m"}
    status = {
        "lastUpdate": last(state="failed", failures=1, lastResyncTime="2026-01-01T10:00:00Z"),
        "conditions": [stalled],
    }
    waiting = decide(spec(), observe(status), POLICY)
    assert (waiting.due, waiting.exhausted) == (False, False)
    assert waiting.requeue_after == 60  # the branch poll, not a retry
    assert decide(spec(), observe(status, commit="c2"), POLICY).fresh
    retried = {**status, "conditions": [{**stalled, "reason": "SecretNotFound"}]}
    assert decide(spec(), observe(retried), POLICY).why == "retry"


def test_continue_resync_runs_again_after_the_period() -> None:
    """ContinueResyncOnCommitMatch re-runs an unchanged Stack once the period passed."""
    s = spec(continueResyncOnCommitMatch=True, resyncFrequencySeconds=60)
    old = {"lastUpdate": last(lastResyncTime="2026-01-01T11:58:00Z")}
    recent = {"lastUpdate": last(lastResyncTime="2026-01-01T11:59:30Z")}
    assert decide(s, observe(old), POLICY).why == "resync"
    assert decide(s, observe(recent), POLICY).requeue_after == pytest.approx(30)


@pytest.mark.parametrize(
    ("failures", "cap", "expected"),
    [(1, 86400, 10), (2, 86400, 20), (5, 86400, 160), (30, 86400, 86400), (10, 60, 60)],
)
def test_backoff_doubles_up_to_the_stacks_cap(failures: int, cap: int, expected: float) -> None:
    """10 s doubling per failure, capped by retryMaxBackoffDurationSeconds."""
    assert backoff(failures, spec(retryMaxBackoffDurationSeconds=cap), POLICY) == expected


def test_each_request_annotation_has_its_own_handshake_field() -> None:
    """A new Flux requestedAt is pending even when our annotation was handled, and vice versa."""
    status = {"observedReconcileRequest": "a", "lastHandledReconcileAt": "t1"}
    assert not Requests("a", "t1").pending(status)
    assert Requests("a", "t2").pending(status)
    assert Requests("b", "t1").pending(status)
    marked: dict[str, Any] = {}
    Requests("b", "t2").mark_handled(marked)
    assert marked == {"observedReconcileRequest": "b", "lastHandledReconcileAt": "t2"}
