"""Short in-call retries of Kubernetes API calls that failed transiently.

``with_retries(fn, *args)`` retries connection errors, 429 and 5xx answers with jittered
exponential backoff (0.2 s doubling to 10 s, at most 8 tries within ~30 s), honouring a
``Retry-After`` header when the server sends one (API Priority and Fairness does on
429). Everything else — 4xx answers such as 404, 409 and 422, and 410 Gone — is raised
at once: a conflict needs a re-read, not a repeat.

Two exceptions to "5xx is transient, 4xx is not":

- A write too large to store — 413 from the apiserver's body limit, or a 500 whose body
  says ``etcdserver: request is too large`` (or, from 2 MiB, the gRPC client's "message
  larger than max") — fails the same way every time: not transient (``request_too_large``).
- A restarting apiserver answers 401/403 for a moment after it listens, before its
  authenticator and authorizer are loaded. So a 401/403 within ``UNREACHABLE_WINDOW``
  seconds of a connection error or 5xx seen by this process counts as transient. The memory
  is process-wide (``REACHABILITY``): ``is_transient`` records every connection error and
  5xx it classifies, and callers that see failures without classifying them (a watch) may
  report them with ``REACHABILITY.observe``.

Backoffs are waited, and the retry budget and the outage window measured, on a ``Clock``
(``RealClock`` unless one is passed).

This is only for hiccups inside one call. Longer outages are the caller's business: the
work queue requeues a failed reconcile with the key's own backoff, and a writer that must
not lose a write (the operator's status writer) keeps retrying it until it lands.
"""

from __future__ import annotations

import http.client
import ssl
import threading
import weakref
from collections.abc import Callable
from typing import Final, ParamSpec, TypeVar

import structlog
from kubernetes import client
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_when_event_set,
    wait_exponential_jitter,
)
from tenacity.stop import stop_base
from urllib3.exceptions import HTTPError

from controller.clock import Clock, RealClock

log = structlog.get_logger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_RETRY_AFTER = 30.0
MAX_ATTEMPTS = 8
MAX_DELAY = 30.0  # seconds: the in-call retry budget
UNREACHABLE_WINDOW = 30.0  # seconds a 401/403 counts as transient after a connection error
RETRY_LOG_INTERVAL = 5.0  # seconds: shorter waits between retries are logged at debug
TOO_LARGE_MARKERS = (
    "request is too large",  # etcd's --max-request-bytes (1.5 MiB by default)
    "larger than max",  # the apiserver's gRPC client to etcd (2 MiB messages)
    "request entity too large",  # the apiserver's body limit (3 MiB), as a 413
)


def request_too_large(exc: BaseException) -> bool:
    """True for a write the server will never store: 413, or a 500 saying it is too large.

    A 500 says so as etcd's "request is too large" or, from 2 MiB, as the gRPC client's
    "trying to send message larger than max".
    """
    if not isinstance(exc, client.ApiException):
        return False
    if exc.status == 413:
        return True
    text = f"{exc.reason or ''} {exc.body or ''}".lower()
    return exc.status == 500 and any(marker in text for marker in TOO_LARGE_MARKERS)


def _unreachable(exc: BaseException) -> bool:
    """A connection-level failure or a 5xx: the apiserver is down, restarting or sick."""
    if isinstance(exc, client.ApiException):
        status = exc.status or 0
        return (status == 0 or status >= 500) and not request_too_large(exc)
    return isinstance(exc, HTTPError | ConnectionError | TimeoutError)


class Reachability:
    """When this process last failed to reach the API server (connection error or 5xx)."""

    def __init__(self, window: float = UNREACHABLE_WINDOW, clock: Clock | None = None) -> None:
        """Remember failures for ``window`` seconds of ``clock`` time."""
        self._window = window
        self._clock = clock or RealClock()
        self._lock = threading.Lock()
        self._last: float | None = None

    def observe(self, exc: BaseException) -> None:
        """Record ``exc`` if it says the apiserver was unreachable; ignore anything else."""
        if _unreachable(exc):
            with self._lock:
                self._last = self._clock.now()

    def recently_unreachable(self) -> bool:
        """True within ``window`` seconds of the last recorded failure."""
        with self._lock:
            last = self._last
        return last is not None and self._clock.now() - last <= self._window

    def forget(self) -> None:
        """Drop the memory (tests start from a reachable apiserver)."""
        with self._lock:
            self._last = None


REACHABILITY = Reachability()


def is_transient(exc: BaseException, reachability: Reachability = REACHABILITY) -> bool:
    """True for connection failures, 429 and 5xx, and 401/403 just after an outage.

    Never for a write too large to store. Records connection failures and 5xx in
    ``reachability`` (see the module docstring).
    """
    reachability.observe(exc)
    if isinstance(exc, client.ApiException):
        if request_too_large(exc):
            return False
        if exc.status in {401, 403}:
            return reachability.recently_unreachable()
        # status 0: the client wrapped a transport (e.g. TLS) failure.
        return exc.status in TRANSIENT_STATUSES or exc.status == 0
    return isinstance(exc, TRANSPORT_FAILURES)


TRANSPORT_FAILURES: Final = (
    HTTPError,
    ConnectionError,
    TimeoutError,
    http.client.HTTPException,
    ssl.SSLError,
)
"""What a call that did not reach the API server, or was cut off in flight, raises: urllib3's
errors, refused or reset connections, timeouts, a truncated or malformed HTTP answer
(``IncompleteRead``, ``RemoteDisconnected``: ``http.client``'s) and TLS failures. Not a
``ValueError`` of our own making, which no retry can mend."""


def retry_after(exc: BaseException | None) -> float | None:
    """Seconds from a ``Retry-After`` header of an ApiException, if any (capped at 30 s)."""
    if not isinstance(exc, client.ApiException) or not exc.headers:
        return None
    value = exc.headers.get("Retry-After")
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff
    return None if seconds is None else min(max(seconds, 0.0), MAX_RETRY_AFTER)


class _Wait:
    """Retry-After when the server gave one, else jittered exponential backoff."""

    def __init__(self) -> None:
        self._backoff = wait_exponential_jitter(multiplier=0.2, max=10, jitter=0.5)

    def __call__(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        server = retry_after(exc)
        return server if server is not None else float(self._backoff(state))


class _StopAfterDelay(stop_base):
    """tenacity's ``stop_after_delay``, measured on a ``Clock`` instead of ``time.monotonic``.

    True once ``max_delay`` seconds have passed since the call's first attempt began, as
    recorded by ``begin`` (the policy's ``before`` hook); a call whose start was not
    recorded counts from its first failure.
    """

    def __init__(self, clock: Clock, max_delay: float) -> None:
        self._clock = clock
        self._max_delay = max_delay
        self._starts: weakref.WeakKeyDictionary[RetryCallState, float] = weakref.WeakKeyDictionary()

    def begin(self, state: RetryCallState) -> None:
        """Record when ``state``'s call began (called before every attempt; keeps the first)."""
        self._starts.setdefault(state, self._clock.now())

    def __call__(self, retry_state: RetryCallState) -> bool:
        """True once the call's budget is spent."""
        now = self._clock.now()
        return now - self._starts.setdefault(retry_state, now) >= self._max_delay


def _log_retry(state: RetryCallState) -> None:
    """Info for a call's first retry and for retries at least RETRY_LOG_INTERVAL apart.

    The quick retries in between go to debug, so a failing call logs at most one line
    every few seconds.
    """
    exc = state.outcome.exception() if state.outcome else None
    wait = state.next_action.sleep if state.next_action else 0.0
    quiet = state.attempt_number > 1 and wait < RETRY_LOG_INTERVAL
    (log.debug if quiet else log.info)(
        "Kubernetes API call failed; retrying",
        attempt=state.attempt_number,
        wait=wait,
        error=str(exc),
    )


def retrying(
    *,
    max_attempts: int = MAX_ATTEMPTS,
    max_delay: float = MAX_DELAY,
    interrupt: threading.Event | None = None,
    clock: Clock | None = None,
) -> Retrying:
    """The retry policy; the defaults suit calls made while reconciling.

    With ``interrupt``, setting that event cuts a backoff short and ends the retries
    (the last error is raised). Backoffs are waited, and ``max_delay`` measured, on
    ``clock``.
    """
    clock = clock or RealClock()
    budget = _StopAfterDelay(clock, max_delay)
    stop = stop_after_attempt(max_attempts) | budget
    if interrupt is not None:
        stop |= stop_when_event_set(interrupt)
    wake = interrupt or threading.Event()  # without an interrupt: never set

    def sleep(seconds: float) -> None:
        clock.wait_event(wake, clock.now() + seconds)

    return Retrying(
        sleep=sleep,
        retry=retry_if_exception(is_transient),
        wait=_Wait(),
        stop=stop,
        before=budget.begin,
        before_sleep=_log_retry,
        reraise=True,
    )


def with_retries(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Call ``fn(*args, **kwargs)``, retrying transient failures; re-raises the last error."""
    result: T = retrying()(fn, *args, **kwargs)
    return result
