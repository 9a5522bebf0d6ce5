"""The condition functions keep the kstatus contract (status contract rules 4, 5, 7, 10, 12)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from status import conditions as c
from status.conditions import READY, RECONCILING, STALLED, Reason

T0 = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)
T1 = T0 + datetime.timedelta(minutes=5)


def types(status: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(type, status, reason) of each condition, in order."""
    return [(x["type"], x["status"], x["reason"]) for x in status["conditions"]]


def test_progressing_reports_generation_and_reconciling() -> None:
    """First sight: Ready Unknown + Reconciling True, observedGeneration everywhere."""
    status = c.progressing({}, 3, "Updating", T0)
    assert types(status) == [
        (RECONCILING, "True", "Progressing"),
        (READY, "Unknown", "Progressing"),
    ]
    assert status["observedGeneration"] == 3
    assert all(x["observedGeneration"] == 3 for x in status["conditions"])


def test_succeeded_removes_reconciling_and_stalled() -> None:
    """Success leaves only Ready=True."""
    status = c.succeeded(c.stalled({}, 1, Reason.INVALID_SPEC, "bad", T0), 2, "done", T1)
    assert types(status) == [(READY, "True", "Succeeded")]


def test_stalled_removes_reconciling_and_sets_ready_false_with_the_same_reason() -> None:
    """Stalled and Reconciling are never both present; Ready carries the reason."""
    status = c.stalled(c.progressing({}, 1, "go", T0), 1, Reason.SECRET_NOT_FOUND, "no", T1)
    assert types(status) == [
        (STALLED, "True", "SecretNotFound"),
        (READY, "False", "SecretNotFound"),
    ]


def test_retrying_keeps_the_error_on_ready_and_the_plan_on_reconciling() -> None:
    """A retry shows the real error on Ready and attempt/next-retry on Reconciling."""
    status = c.retrying({}, 1, Reason.UPDATE_FAILED, "boom: disk full", "attempt 2 at 12:05", T0)
    assert types(status) == [
        (RECONCILING, "True", "ProgressingWithRetry"),
        (READY, "False", "UpdateFailed"),
    ]
    assert c.get_condition(status, READY)["message"] == "boom: disk full"  # type: ignore[index]


def test_transition_time_moves_only_when_status_changes() -> None:
    """A new reason or message alone keeps lastTransitionTime; a status flip moves it."""
    first = c.retrying({}, 1, Reason.UPDATE_FAILED, "a", "retry 1", T0)
    second = c.retrying(first, 1, Reason.UPDATE_FAILED, "b", "retry 2", T1)
    ready = c.get_condition(second, READY)
    assert ready is not None
    assert ready["lastTransitionTime"] == "2026-01-01T12:00:00Z"
    third = c.succeeded(second, 1, "ok", T1)
    ready = c.get_condition(third, READY)
    assert ready is not None
    assert ready["lastTransitionTime"] == "2026-01-01T12:05:00Z"


def test_identical_inputs_give_identical_output() -> None:
    """Reapplying the same state is a no-op (no diff, so no write)."""
    once = c.succeeded({}, 4, "ok", T0)
    assert c.succeeded(once, 4, "ok", T1) == once


def test_other_fields_and_unknown_conditions_survive_in_order() -> None:
    """Fields like outputs are kept; foreign conditions sort after ours."""
    start = {"outputs": {"x": 1}, "conditions": [{"type": "Zeta", "status": "True"}]}
    status = c.progressing(start, 1, "go", T0)
    assert status["outputs"] == {"x": 1}
    assert [x["type"] for x in status["conditions"]] == [RECONCILING, READY, "Zeta"]


def test_input_is_not_mutated() -> None:
    """The functions return a new status and leave the argument alone."""
    start: dict[str, Any] = {"conditions": []}
    c.progressing(start, 1, "go", T0)
    assert start == {"conditions": []}


def test_long_messages_are_truncated_to_the_api_limit() -> None:
    """A 40000-character error still fits the 32768 limit, and says it was cut."""
    status = c.stalled({}, 1, Reason.UPDATE_FAILED, "x" * 40000, T0)
    assert all(len(x["message"]) <= c.MAX_MESSAGE for x in status["conditions"])
    assert all(x["message"].endswith(c.TRUNCATED) for x in status["conditions"])


@pytest.mark.parametrize("char", ["x", "\u00e9", "\u20ac", "\U0001f600"])
def test_a_cut_message_fits_in_bytes_and_keeps_whole_characters(char: str) -> None:
    """Cut by UTF-8 bytes (stricter than the API's character count), never inside a character."""
    message = char * (c.MAX_MESSAGE + 1)
    ready = c.get_condition(c.succeeded({}, 1, message, T0), READY)
    assert ready is not None
    cut = ready["message"]
    assert len(cut.encode()) <= c.MAX_MESSAGE
    assert len(cut.encode()) > c.MAX_MESSAGE - len(char.encode()) - len(c.TRUNCATED.encode())
    assert cut == char * (len(cut) - len(c.TRUNCATED)) + c.TRUNCATED


def test_a_message_at_the_limit_is_kept_whole() -> None:
    """Exactly 32768 bytes is not cut."""
    message = "x" * c.MAX_MESSAGE
    ready = c.get_condition(c.succeeded({}, 1, message, T0), READY)
    assert ready is not None
    assert ready["message"] == message


@pytest.mark.parametrize("reason", list(Reason))
def test_every_reason_matches_the_api_pattern(reason: Reason) -> None:
    """Each reason is CamelCase and valid for metav1.Condition."""
    import re  # noqa: PLC0415

    assert re.fullmatch(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?", reason.value)
    assert len(reason.value) <= 128


def test_a_stall_of_the_objects_own_generation_is_kept() -> None:
    """Only a Stalled status older than the object changes; anything else is as it was."""
    stalled = c.stalled({}, 2, c.Reason.INVALID_SPEC, "bad", T0)
    assert c.without_stale_stall(stalled, 2, T0) is stalled
    ready = c.succeeded({}, 1, "ok", T0)
    assert c.without_stale_stall(ready, 3, T0) is ready
    stale = c.without_stale_stall(stalled, 3, T0)
    assert c.get_condition(stale, "Stalled") is None
    reconciling = c.get_condition(stale, "Reconciling")
    assert reconciling is not None
    assert (reconciling["status"], reconciling["reason"]) == ("True", "InvalidSpec")
    assert reconciling["observedGeneration"] == 2
    assert reconciling["message"] == "generation 3 awaits reconciling; generation 2 stalled: bad"


def test_a_stale_stall_written_again_keeps_reconcilings_transition_time() -> None:
    """Rule 10: a second stale verdict does not move Reconciling's lastTransitionTime."""
    stalled = c.stalled({}, 2, c.Reason.RETRIES_EXHAUSTED, "gave up", T0)
    first = c.without_stale_stall(stalled, 3, T0)
    later = T0 + datetime.timedelta(minutes=2)
    again = c.stalled(first, 2, c.Reason.RETRIES_EXHAUSTED, "gave up", later)
    second = c.without_stale_stall(again, 3, later, before=first)
    assert c.get_condition(second, "Reconciling") == c.get_condition(first, "Reconciling")
