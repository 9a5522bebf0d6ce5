"""How a long-lived loop survives a failed pass: it logs once per streak, backs off, goes on.

Role: the one place that says what a Kubernetes client call can raise, and what a loop that
runs for the life of the process does when a pass of it fails. The operator's loops (an
informer's reflectors and resync, source discovery, leader election, the acknowledger, a
run pod's watch, the metrics server's reviews) use it; none of them may die of one call.

``CLIENT_FAILURES`` is what a call through the ``kubernetes`` client raises when the API
server is away, slow, restarting or garbled, not only ``ApiException`` (an answer that is
not 2xx): urllib3's ``HTTPError`` family (``MaxRetryError`` for a refused connection,
``ProtocolError``, ``ReadTimeoutError``), ``http.client``'s ``HTTPException``
(``IncompleteRead``), ``OSError`` (sockets: ``ConnectionError``, ``TimeoutError``,
``ssl.SSLError``) and ``ValueError`` (a body that does not decode: ``json.JSONDecodeError``,
``UnicodeDecodeError``). A loop expects these; anything else is a bug, which it survives too.

``Backoff`` is client-go's reflector backoff (0.8 s doubling to 30 s, jittered, reset after
two quiet minutes). ``FailureStreak`` is one loop's run of consecutive failures:
``failed(err)`` returns how long to back off and logs the first failure of a streak (a
warning for an expected failure, an error with its traceback for a bug), then a reminder
every ``REMIND_EVERY`` seconds while the streak lasts, the failures in between at debug;
``succeeded()`` ends a streak and says so once (info, with how many passes failed). So an
hour of API outage costs each loop a handful of lines. ``retryable(err)`` tells a failure
that the same call may not meet again (anything but a refusal that stands) from one it
will.

Guarantees: ``failed`` and ``succeeded`` are thread-safe (request threads share a streak);
time is read from the streak's ``Clock``; no failure's body is logged (``describe``).
"""

from __future__ import annotations

import dataclasses
import http.client
import random
import threading
from typing import Final

import structlog
from kubernetes import client
from urllib3.exceptions import HTTPError

from controller.clock import Clock
from controller.retry import is_transient

log = structlog.get_logger(__name__)

CLIENT_FAILURES: Final[tuple[type[Exception], ...]] = (
    client.ApiException,
    HTTPError,
    http.client.HTTPException,
    OSError,
    ValueError,
)
"""What a call through the ``kubernetes`` client raises when the API server fails it."""

REMIND_EVERY: Final = 300.0
"""Seconds between two warnings that a streak of failures goes on."""


def describe(err: BaseException) -> str:
    """A short, body-free description of ``err`` for the log (an answer's status and reason)."""
    if isinstance(err, client.ApiException):
        return f"{type(err).__name__}: {err.status} {err.reason}"
    return f"{type(err).__name__}: {err}"


def retryable(err: BaseException) -> bool:
    """Whether the same call may succeed later: a client failure, but not a refusal that stands.

    A 4xx answer stands (429, and 401/403 just after an outage, aside: ``is_transient``); a
    connection, transport or decoding failure, a 5xx, may pass. A bug never does.
    """
    if isinstance(err, client.ApiException):
        return is_transient(err)
    return isinstance(err, CLIENT_FAILURES)


@dataclasses.dataclass
class Backoff:
    """client-go's reflector backoff: 0.8 s doubling to 30 s, full jitter, reset after 2 min."""

    initial: float = 0.8
    cap: float = 30.0
    reset_after: float = 120.0
    _failures: int = 0
    _last_failure: float = 0.0

    def next_delay(self, now: float) -> float:
        """Record a failure at ``now``; returns how long to wait before trying again."""
        if now - self._last_failure > self.reset_after:
            self._failures = 0
        self._last_failure = now
        base = min(self.cap, self.initial * 2.0**self._failures)
        self._failures += 1
        return min(self.cap, base + random.uniform(0, base))  # noqa: S311 - jitter, not crypto


class FailureStreak:
    """One loop's consecutive failures: when to log them and how long to back off."""

    def __init__(
        self,
        loop: str,
        clock: Clock,
        *,
        backoff: Backoff | None = None,
        expected: tuple[type[BaseException], ...] = CLIENT_FAILURES,
    ) -> None:
        """A streak of the loop named ``loop`` (logged as ``loop=``), timed by ``clock``.

        ``expected``: failures logged as warnings without a traceback; any other exception
        is logged as an error with one. ``backoff``: a ``Backoff()`` unless given.
        """
        self._loop, self._clock, self._expected = loop, clock, expected
        self._backoff = backoff or Backoff()
        self._lock = threading.Lock()
        # Guarded by _lock: failures in this streak, when it began, when it was last logged.
        self._failures = 0
        self._began = 0.0
        self._logged = 0.0

    @property
    def failures(self) -> int:
        """How many passes failed in a row (0: no streak)."""
        with self._lock:
            return self._failures

    def failed(self, err: BaseException, **fields: object) -> float:
        """Record a failed pass; returns the seconds to back off before the next one.

        ``fields`` go with the log line (what the pass was about).
        """
        now = self._clock.now()
        with self._lock:
            delay = self._backoff.next_delay(now)
            self._failures += 1
            failures = self._failures
            if failures == 1:
                self._began = self._logged = now
                level = "first"
            elif now - self._logged >= REMIND_EVERY:
                self._logged = now
                level = "reminder"
            else:
                level = "quiet"
            lasted = now - self._began
        expected = isinstance(err, self._expected)
        line = {
            "loop": self._loop,
            "error": describe(err),
            "retry_in": round(delay, 1),
            "failures": failures,
            **fields,
        }
        if level == "first" and not expected:
            log.error("A loop failed unexpectedly; backing off", exc_info=err, **line)
        elif level == "first":
            log.warning("A loop failed; backing off", **line)
        elif level == "reminder":
            log.warning("A loop is still failing; backing off", failing_for=round(lasted), **line)
        else:
            log.debug("A loop failed again; backing off", **line)
        return delay

    def succeeded(self, **fields: object) -> None:
        """Record a pass that worked: a streak in progress ends, and the log says so once."""
        with self._lock:
            failures, self._failures = self._failures, 0
            lasted = self._clock.now() - self._began
        if failures:
            log.info(
                "A loop recovered",
                loop=self._loop,
                failures=failures,
                failing_for=round(lasted, 1),
                **fields,
            )
