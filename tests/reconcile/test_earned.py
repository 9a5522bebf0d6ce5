"""``reconcile.earned``: the conditions a recorded run earned, rebuilt from ``lastUpdate``."""

from __future__ import annotations

from typing import Any

import pytest

from reconcile.earned import earned, returned, shows
from reconcile.policy import Policy
from reconcile.spec import parse_spec
from reconcile.verdict import Shape
from status.conditions import Reason

POLICY = Policy(retry_base_delay=10, max_update_failures=3, wait_poll=30)
SPEC = parse_spec(
    {"stack": "dev", "projectRepo": "https://git.example/r.git", "branch": "main"}, "ns"
)
COMMIT = "2b08897" + "0" * 33
EXHAUSTED = (
    "up failed {} times in a row; not retrying until the Stack, its source or a "
    "reconcile request changes. Last error: boom"
)


def last(**fields: Any) -> dict[str, Any]:
    """A status whose ``lastUpdate`` has ``fields`` over a failed ``up`` at ``COMMIT``."""
    base = {
        "state": "failed",
        "type": "up",
        "lastAttemptedCommit": COMMIT,
        "lastResyncTime": "2026-01-01T00:00:00Z",
        "message": "boom",
        "failures": 1,
    }
    return {"lastUpdate": {**base, **fields}}


def test_a_success_earned_ready_with_its_summary_at_its_commit() -> None:
    """Also for a lastUpdate written before ``reason`` was recorded."""
    conditions = earned(
        last(state="succeeded", message="pulumi up succeeded (create 1)"), SPEC, POLICY
    )
    assert conditions is not None
    assert (conditions.shape, conditions.reason) == (Shape.SUCCEEDED, Reason.SUCCEEDED)
    assert conditions.message == "pulumi up succeeded (create 1) at commit 2b08897"


def test_a_failure_earned_its_retry_at_the_time_decide_waits_for() -> None:
    """The second failure in a row: retried 20 s after it ended."""
    conditions = earned(last(reason="UpdateFailed", stalled=False, failures=2), SPEC, POLICY)
    assert conditions is not None
    assert (conditions.shape, conditions.reason, conditions.message) == (
        Shape.RETRYING,
        Reason.UPDATE_FAILED,
        "boom",
    )
    assert conditions.retry_message == "Attempt 2 failed; retrying at 2026-01-01T00:00:20Z"


@pytest.mark.parametrize(
    ("fields", "reason", "message"),
    [
        ({"reason": "ProgramInvalid", "stalled": True}, Reason.PROGRAM_INVALID, "boom"),
        (
            {"reason": "RetriesExhausted", "stalled": True, "failures": 3},
            Reason.RETRIES_EXHAUSTED,
            EXHAUSTED.format(3),
        ),
        (
            {"reason": "UpdateFailed", "stalled": False, "failures": 4},  # the cap was lowered
            Reason.RETRIES_EXHAUSTED,
            EXHAUSTED.format(4),
        ),
    ],
)
def test_a_stalling_failure_earned_stalled(
    fields: dict[str, Any], reason: Reason, message: str
) -> None:
    """Stalled with the run's own message (the cap's message for too many failures)."""
    conditions = earned(last(**fields), SPEC, POLICY)
    assert conditions is not None
    assert (conditions.shape, conditions.reason, conditions.message) == (
        Shape.STALLED,
        reason,
        message,
    )


def test_a_lock_held_elsewhere_earned_waiting() -> None:
    """``UpdateConflict`` waits; it is not a failure."""
    conditions = earned(last(reason="UpdateConflict", stalled=False, failures=0), SPEC, POLICY)
    assert conditions is not None
    assert (conditions.shape, conditions.reason) == (Shape.WAITING, Reason.UPDATE_CONFLICT)
    assert conditions.message == "Waiting for another update to finish: boom"


@pytest.mark.parametrize(
    "status",
    [
        {},
        last(),  # written before reason was recorded: its verdict cannot be known
        last(reason="NotAReason", stalled=False),
        last(reason="UpdateFailed", stalled=False, lastResyncTime=None),
    ],
)
def test_nothing_is_earned_where_the_record_cannot_say(status: dict[str, Any]) -> None:
    """None: the caller writes nothing."""
    assert earned(status, SPEC, POLICY) is None
    assert returned(status, SPEC, POLICY) is None


def test_a_status_showing_what_was_earned_needs_nothing() -> None:
    """``shows`` compares the reason and the shape; ``returned`` is None then."""
    status = last(state="succeeded", message="pulumi up succeeded (no changes)")
    ready = {"type": "Ready", "status": "True", "reason": "Succeeded", "message": "older words"}
    conditions = earned(status, SPEC, POLICY)
    assert conditions is not None
    assert shows({**status, "conditions": [ready]}, conditions)
    assert returned({**status, "conditions": [ready]}, SPEC, POLICY) is None


def test_returning_names_the_verdict_that_ended() -> None:
    """The Event, posted once on the change, says which verdict is over and what stands."""
    status = last(state="succeeded", message="pulumi up succeeded (no changes)")
    waiting = {"type": "Ready", "status": "False", "reason": "SourceNotReady", "message": "x"}
    verdict = returned({**status, "conditions": [waiting]}, SPEC, POLICY)
    assert verdict is not None
    assert verdict.event is not None
    assert verdict.event.on_change
    assert verdict.event.message == (
        "SourceNotReady is over; the last update's result stands: "
        "pulumi up succeeded (no changes) at commit 2b08897"
    )
