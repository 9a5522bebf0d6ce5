"""Transient API failures are retried (honouring Retry-After); others are raised at once."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
from collections.abc import Callable, Iterator

import pytest
import structlog
from kubernetes import client
from tenacity import RetryCallState
from urllib3.exceptions import MaxRetryError, NewConnectionError, ProtocolError

from controller import retry
from controller.clock import FakeClock

# Real seconds a background thread may take to react; only ever reached by a failing test.
JOIN_TIMEOUT = 5.0


@pytest.fixture(autouse=True)
def reachable() -> Iterator[None]:
    """Each test starts (and leaves) the process-wide memory of outages empty."""
    retry.REACHABILITY.forget()
    yield
    retry.REACHABILITY.forget()


def api_error(
    status: int, headers: dict[str, str] | None = None, message: str = "test"
) -> client.ApiException:
    """An ApiException as the client raises it, with a Status body carrying ``message``."""
    body = json.dumps({"kind": "Status", "status": "Failure", "message": message, "code": status})
    exc = client.ApiException(status=status, reason="test", body=body)
    exc.headers = headers
    return exc


def refused() -> MaxRetryError:
    """What urllib3 raises once it gives up connecting to a stopped apiserver."""
    reason = NewConnectionError(None, "Failed to establish a new connection: [Errno 111]")  # type: ignore[arg-type]
    return MaxRetryError(None, "/apis", reason)  # type: ignore[arg-type]


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
        pytest.param(api_error(403), False, id="403"),
        pytest.param(api_error(401), False, id="401"),
        pytest.param(refused(), True, id="max-retries"),
        pytest.param(ValueError("bug"), False, id="bug"),
        pytest.param(http.client.IncompleteRead(b"{"), True, id="cut-off-body"),
        pytest.param(http.client.RemoteDisconnected("gone"), True, id="remote-disconnected"),
        pytest.param(ssl.SSLError("handshake"), True, id="tls"),
        pytest.param(
            api_error(500, message="etcdserver: request is too large"), False, id="etcd-too-large"
        ),
        pytest.param(
            api_error(
                500,
                message="rpc error: code = ResourceExhausted desc = trying to send message "
                "larger than max (2097624 vs. 2097152)",
            ),
            False,
            id="grpc-too-large",
        ),
        pytest.param(
            api_error(413, message="Request entity too large: limit is 3145728"),
            False,
            id="413-too-large",
        ),
    ],
)
def test_is_transient(exc: BaseException, *, transient: bool) -> None:
    """Only connection errors, 429 and 5xx count as transient (not a too-large write)."""
    assert retry.is_transient(exc) is transient


@pytest.mark.parametrize("status", [401, 403])
@pytest.mark.parametrize(
    "outage",
    [
        pytest.param(refused(), id="refused"),
        pytest.param(ProtocolError("Connection aborted."), id="reset"),
        pytest.param(api_error(503), id="503"),
        pytest.param(api_error(0), id="transport"),
    ],
)
def test_auth_errors_just_after_an_outage_are_transient(outage: BaseException, status: int) -> None:
    """A restarting apiserver answers 401/403 before its authorizer loads: retry those."""
    clock = FakeClock(start=1000.0)
    reachability = retry.Reachability(window=30.0, clock=clock)
    assert not retry.is_transient(api_error(status), reachability)
    assert retry.is_transient(outage, reachability)
    clock.step(0.1)
    assert retry.is_transient(api_error(status), reachability)
    clock.step(29.8)
    assert retry.is_transient(api_error(status), reachability)
    clock.step(0.2)  # the window is measured from the connection error, not extended by 403s
    assert not retry.is_transient(api_error(status), reachability)


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(api_error(429), id="429"),
        pytest.param(api_error(404), id="404"),
        pytest.param(api_error(500, message="etcdserver: request is too large"), id="too-large"),
    ],
)
def test_answers_that_are_not_outages_leave_auth_errors_final(answer: BaseException) -> None:
    """Throttling, a 404 or a too-large write mean the apiserver is up: 403 stays final."""
    reachability = retry.Reachability(clock=FakeClock())
    retry.is_transient(answer, reachability)
    assert not retry.is_transient(api_error(403), reachability)


def test_the_memory_of_outages_is_shared_by_every_caller() -> None:
    """A connection error classified anywhere makes the next 403 anywhere transient."""
    assert not retry.is_transient(api_error(403))
    retry.is_transient(refused())  # e.g. the event recorder saw the apiserver go away
    assert retry.REACHABILITY.recently_unreachable()
    assert retry.is_transient(api_error(403))  # e.g. the status writer, a moment later


def test_a_403_after_an_outage_is_retried_in_call() -> None:
    """Refused, then 403 while the authorizer loads, then the answer: three calls."""
    outcomes: list[BaseException | str] = [refused(), api_error(403), "ok"]

    def call() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    policy = retry.retrying()
    policy.sleep = lambda _seconds: None
    assert policy(call) == "ok"
    assert outcomes == []


def test_request_too_large() -> None:
    """413 and etcd's 500 are too large; other 500s and non-API errors are not."""
    assert retry.request_too_large(api_error(413))
    assert retry.request_too_large(api_error(500, message="etcdserver: request is too large"))
    assert not retry.request_too_large(api_error(500, message="etcdserver: request timed out"))
    assert not retry.request_too_large(ValueError("request is too large"))


def in_thread(call: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    """Run ``call`` in a daemon thread; what it returns or raises lands in the list."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as err:  # noqa: BLE001 - handed to the test
            outcome.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def test_an_interrupt_ends_the_retries_and_cuts_the_backoff_short() -> None:
    """An interrupt during a 30 s Retry-After wait wakes it; the last error is raised."""
    clock, interrupt = FakeClock(), threading.Event()
    calls: list[int] = []

    def call() -> None:
        calls.append(1)
        raise api_error(429, {"Retry-After": "30"})

    policy = retry.retrying(max_attempts=100, max_delay=300, interrupt=interrupt, clock=clock)
    thread, outcome = in_thread(lambda: policy(call))
    assert clock.wait_for_waiters(1), "the backoff should wait on the clock"
    interrupt.set()  # closing during the wait
    thread.join(JOIN_TIMEOUT)
    [raised] = outcome
    assert isinstance(raised, client.ApiException)
    assert raised.status == 429
    assert len(calls) == 2  # the wait was cut short, then the stop condition held
    assert clock.now() == 0.0


def test_the_backoff_is_waited_on_the_clock() -> None:
    """A 30 s Retry-After ends when the clock has moved 30 s, not before."""
    clock = FakeClock()
    outcomes: list[BaseException | str] = [api_error(429, {"Retry-After": "30"}), "ok"]

    def call() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    thread, result = in_thread(lambda: retry.retrying(clock=clock)(call))
    assert clock.wait_for_waiters(1)
    clock.step(29.9)
    assert clock.wait_for_waiters(1), "29.9 s is short of the Retry-After"
    assert len(outcomes) == 1
    clock.step(0.1)
    thread.join(JOIN_TIMEOUT)
    assert result == ["ok"]


def test_the_retry_budget_is_measured_on_the_clock() -> None:
    """A call that took max_delay seconds of the clock is not retried, however fast it was."""
    clock = FakeClock()
    calls: list[int] = []

    def slow_call() -> None:
        calls.append(1)
        clock.step(retry.MAX_DELAY)
        raise api_error(503)

    policy = retry.retrying(max_attempts=100, clock=clock)
    policy.sleep = lambda _seconds: None
    with pytest.raises(client.ApiException):
        policy(slow_call)
    assert calls == [1]

    clock.step(3600.0)  # the next call gets a budget of its own
    calls.clear()
    steps = iter([10.0, 10.0, 10.0])

    def call() -> None:
        calls.append(1)
        clock.step(next(steps))
        raise api_error(503)

    with pytest.raises(client.ApiException):
        policy(call)
    assert len(calls) == 3  # 10 s, 20 s, then 30 s: spent


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


def test_a_failing_call_logs_at_most_one_info_line_every_few_seconds() -> None:
    """The first retry and the long waits are logged at info; the quick ones at debug."""
    policy = retry.retrying(max_attempts=8, max_delay=300)
    policy.sleep = lambda _seconds: None

    def call() -> None:
        raise refused()

    with structlog.testing.capture_logs() as logs, pytest.raises(MaxRetryError):
        policy(call)
    lines = [line for line in logs if line["event"] == "Kubernetes API call failed; retrying"]
    assert [line["attempt"] for line in lines] == [1, 2, 3, 4, 5, 6, 7]
    info = [line for line in lines if line["log_level"] == "info"]
    assert info[0]["attempt"] == 1
    assert all(line["wait"] >= retry.RETRY_LOG_INTERVAL for line in info[1:])
    assert [line["attempt"] for line in info] == [1, 6, 7]  # waits 6.4 s and 10 s (+ jitter)
