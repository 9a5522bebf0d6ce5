"""What a long-lived loop does with a failed pass (``controller.failures``).

Which failures it expects, the backoff, and a log of one line per streak of failures (plus
a reminder while it lasts).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog
from kubernetes import client

from controller import retry
from controller.clock import FakeClock
from controller.failures import (
    CLIENT_FAILURES,
    REMIND_EVERY,
    Backoff,
    FailureStreak,
    describe,
    retryable,
)
from tests.controller.client_failures import FAILURES


@pytest.fixture(autouse=True)
def reachable() -> Iterator[None]:
    """Each test starts (and leaves) the process-wide memory of outages empty."""
    retry.REACHABILITY.forget()
    yield
    retry.REACHABILITY.forget()


@pytest.mark.parametrize("name", [name for name in FAILURES if name != "RuntimeError"])
def test_every_kind_of_client_failure_is_expected(name: str) -> None:
    """Each failure a client call raises is a ``CLIENT_FAILURES``; a bug is not."""
    assert isinstance(FAILURES[name](), CLIENT_FAILURES)
    assert not isinstance(FAILURES["RuntimeError"](), CLIENT_FAILURES)


@pytest.mark.parametrize(
    ("failures", "low", "high"),
    [
        pytest.param(0, 0.8, 1.6, id="first"),
        pytest.param(1, 1.6, 3.2, id="second"),
        pytest.param(5, 25.6, 30.0, id="sixth-capped"),
        pytest.param(10, 30.0, 30.0, id="far-capped"),
    ],
)
def test_backoff_doubles_with_jitter_up_to_the_cap(failures: int, low: float, high: float) -> None:
    """The n-th consecutive failure waits between base and 2·base, never above 30 s."""
    backoff = Backoff()
    for _ in range(failures):
        backoff.next_delay(0.0)
    assert low <= backoff.next_delay(0.0) <= high


def test_backoff_resets_after_two_quiet_minutes() -> None:
    """After 2 min without failures the delay starts from 0.8 s again."""
    backoff = Backoff()
    for _ in range(6):
        backoff.next_delay(0.0)
    assert backoff.next_delay(121.0) <= 1.6


def loud(logs: list[structlog.typing.EventDict]) -> list[tuple[str, str]]:
    """(level, event) of the lines above debug."""
    return [(e["log_level"], e["event"]) for e in logs if e["log_level"] != "debug"]


def test_a_streak_is_logged_once_then_its_end_once() -> None:
    """Ten failures: one warning (the rest at debug), then one line when it recovers."""
    clock = FakeClock()
    streak = FailureStreak("a loop", clock)
    with structlog.testing.capture_logs() as logs:
        for _ in range(10):
            delay = streak.failed(ConnectionRefusedError(111, "Connection refused"), kind="K")
            clock.step(delay)
        assert streak.failures == 10
        streak.succeeded()
        streak.succeeded()  # no streak: nothing to say
    assert loud(logs) == [
        ("warning", "A loop failed; backing off"),
        ("info", "A loop recovered"),
    ]
    assert logs[0]["loop"] == "a loop"
    assert logs[0]["kind"] == "K"
    assert logs[0]["error"] == "ConnectionRefusedError: [Errno 111] Connection refused"
    assert logs[-1]["failures"] == 10
    assert streak.failures == 0


def test_a_long_streak_is_remembered_every_few_minutes() -> None:
    """Failing for over ``REMIND_EVERY`` seconds: one more warning, saying for how long."""
    clock = FakeClock()
    streak = FailureStreak("a loop", clock)
    with structlog.testing.capture_logs() as logs:
        streak.failed(TimeoutError("timed out"))
        clock.step(REMIND_EVERY - 1)
        streak.failed(TimeoutError("timed out"))
        clock.step(1)
        streak.failed(TimeoutError("timed out"))
    assert loud(logs) == [
        ("warning", "A loop failed; backing off"),
        ("warning", "A loop is still failing; backing off"),
    ]
    assert logs[-1]["failing_for"] == REMIND_EVERY


def test_a_bug_is_an_error_with_its_traceback() -> None:
    """An exception no client call raises is logged as an error, with the exception."""
    streak = FailureStreak("a loop", FakeClock())
    with structlog.testing.capture_logs() as logs:
        err = RuntimeError("a bug")
        streak.failed(err)
    assert loud(logs) == [("error", "A loop failed unexpectedly; backing off")]
    assert logs[0]["exc_info"] is err


def test_describe_never_shows_an_answers_body() -> None:
    """An ApiException is its status and reason; its body (maybe a Secret) stays out."""
    err = client.ApiException(status=409, reason="Conflict")
    err.body = '{"data": {"token": "s3cr3t"}}'
    assert describe(err) == "ApiException: 409 Conflict"


@pytest.mark.parametrize(
    ("err", "expected"),
    [
        pytest.param(client.ApiException(status=503), True, id="503"),
        pytest.param(client.ApiException(status=422), False, id="422"),
        pytest.param(FAILURES["MaxRetryError"](), True, id="refused"),
        pytest.param(FAILURES["JSONDecodeError"](), True, id="garbled"),
        pytest.param(RuntimeError("a bug"), False, id="bug"),
    ],
)
def test_retryable_is_a_client_failure_but_a_standing_refusal(
    err: Exception, *, expected: bool
) -> None:
    """A 4xx stands; the API server away, a 5xx or a garbled answer may pass; a bug never."""
    assert retryable(err) is expected
