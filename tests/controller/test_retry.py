"""Transient API failures are retried (honouring Retry-After); others are raised at once."""

from __future__ import annotations

import pytest
from kubernetes import client
from tenacity import RetryCallState
from urllib3.exceptions import ProtocolError

from controller import retry


def api_error(status: int, headers: dict[str, str] | None = None) -> client.ApiException:
    """An ApiException as the client raises it."""
    exc = client.ApiException(status=status, reason="test")
    exc.headers = headers
    return exc


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        pytest.param(api_error(429), True, id="429"),
        pytest.param(api_error(503), True, id="503"),
        pytest.param(api_error(0), True, id="transport"),
        pytest.param(ProtocolError("reset"), True, id="protocol"),
        pytest.param(ConnectionRefusedError(), True, id="refused"),
        pytest.param(api_error(404), False, id="404"),
        pytest.param(api_error(409), False, id="409-conflict"),
        pytest.param(api_error(410), False, id="410-gone"),
        pytest.param(api_error(422), False, id="422"),
        pytest.param(ValueError("bug"), False, id="bug"),
    ],
)
def test_is_transient(exc: BaseException, *, transient: bool) -> None:
    """Only connection errors, 429 and 5xx count as transient."""
    assert retry.is_transient(exc) is transient


def test_retries_until_success() -> None:
    """Two 503s then a result: the result is returned after three calls."""
    sleeps: list[float] = []
    outcomes: list[BaseException | str] = [api_error(503), api_error(503), "ok"]

    def call() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    policy = retry.retrying()
    policy.sleep = sleeps.append
    assert policy(call) == "ok"
    assert len(sleeps) == 2
    assert all(0 < s <= 10.5 for s in sleeps)


def test_retry_after_header_sets_the_wait() -> None:
    """A 429 with Retry-After: 3 waits 3 s before the next try."""
    sleeps: list[float] = []
    outcomes: list[BaseException | str] = [api_error(429, {"Retry-After": "3"}), "ok"]

    def call() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    policy = retry.retrying()
    policy.sleep = sleeps.append
    assert policy(call) == "ok"
    assert sleeps == [3.0]


def test_non_transient_errors_are_raised_without_retry() -> None:
    """A 409 is raised on the first try."""
    calls: list[int] = []

    def call() -> None:
        calls.append(1)
        raise api_error(409)

    with pytest.raises(client.ApiException) as raised:
        retry.with_retries(call)
    assert raised.value.status == 409
    assert calls == [1]


def test_gives_up_after_the_attempt_limit() -> None:
    """A call that always fails transiently is tried max_attempts times, then raises."""
    calls: list[int] = []

    def call() -> None:
        calls.append(1)
        raise api_error(500)

    policy = retry.retrying(max_attempts=3)
    policy.sleep = lambda _seconds: None
    with pytest.raises(client.ApiException):
        policy(call)
    assert len(calls) == 3


@pytest.mark.parametrize(
    ("header", "expected"),
    [("2.5", 2.5), ("120", 30.0), ("Wed, 21 Oct 2015 07:28:00 GMT", None), (None, None)],
)
def test_retry_after_parsing(header: str | None, expected: float | None) -> None:
    """Seconds are used (capped at 30 s); dates and absence fall back to backoff."""
    headers = {"Retry-After": header} if header is not None else {}
    assert retry.retry_after(api_error(429, headers)) == expected


def test_wait_falls_back_to_jittered_backoff() -> None:
    """Without Retry-After the n-th wait grows but stays under the 10 s cap (+ jitter)."""
    wait = retry._Wait()  # noqa: SLF001

    def state(attempt: int) -> RetryCallState:
        s = RetryCallState(retry_object=retry.retrying(), fn=None, args=(), kwargs={})
        s.attempt_number = attempt
        s.set_exception((client.ApiException, api_error(503), None))
        return s

    assert 0.2 <= wait(state(1)) <= 0.7
    assert 10.0 <= wait(state(20)) <= 10.5
