"""Short in-call retries of Kubernetes API calls that failed transiently.

``with_retries(fn, *args)`` retries connection errors, 429 and 5xx answers with jittered
exponential backoff (0.2 s doubling to 10 s, at most 8 tries within ~30 s), honouring a
``Retry-After`` header when the server sends one (API Priority and Fairness does on
429). Everything else — 4xx answers such as 404, 409 and 422, and 410 Gone — is raised
at once: a conflict needs a re-read, not a repeat.

This is only for hiccups inside one call. Longer outages are the work queue's business:
the reconcile fails as transient and is requeued with the key's own backoff.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec, TypeVar

import structlog
from kubernetes import client
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential_jitter,
)
from urllib3.exceptions import HTTPError

log = structlog.get_logger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_RETRY_AFTER = 30.0


def is_transient(exc: BaseException) -> bool:
    """True for connection-level failures and 429/5xx answers."""
    if isinstance(exc, client.ApiException):
        # status 0: the client wrapped a transport (e.g. TLS) failure.
        return exc.status in TRANSIENT_STATUSES or exc.status == 0
    return isinstance(exc, HTTPError | ConnectionError | TimeoutError)


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


def _log_retry(state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome else None
    wait = state.next_action.sleep if state.next_action else 0.0
    log.info(
        "Kubernetes API call failed; retrying",
        attempt=state.attempt_number,
        wait=wait,
        error=str(exc),
    )


def retrying(*, max_attempts: int = 8, max_delay: float = 30.0) -> Retrying:
    """The retry policy; the defaults suit calls made while reconciling."""
    return Retrying(
        retry=retry_if_exception(is_transient),
        wait=_Wait(),
        stop=stop_after_attempt(max_attempts) | stop_after_delay(max_delay),
        before_sleep=_log_retry,
        reraise=True,
    )


def with_retries(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Call ``fn(*args, **kwargs)``, retrying transient failures; re-raises the last error."""
    result: T = retrying()(fn, *args, **kwargs)
    return result
