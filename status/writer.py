"""The status writer: the only code that writes a Stack's ``/status``.

``StatusWriter.update(key, mutate)`` applies ``mutate`` (a pure function, usually from
``status.conditions``) to the newest status this process knows, and writes the result as a
JSON merge patch of just the fields that differ, with the object's ``resourceVersion`` as a
precondition. When nothing differs it writes nothing — an idle Stack costs no API call.
A 409 (someone wrote in between) re-reads the object from the API and applies ``mutate``
again on fresh data. Writes go to the status subresource, so they never bump
``metadata.generation``.

A status is never written claiming ``Stalled`` for a generation older than the object's
(``conditions.without_stale_stall``): a verdict computed for a generation that a spec edit
or the deletion has since superseded lands as ``Reconciling`` instead.

"Newest status": the informer's cache lags our own writes, so the writer reads through a
``controller.view.ReadYourWritesView`` and records there the object each PATCH returned; the
view answers with it until the cache has caught up. Otherwise a patch computed against a
stale cached status could forget to remove a field written since. Other code reading the
same view sees the writer's writes at once too.

Two kinds of intent reach the writer:

- ``update`` — a conclusion (a run started or ended, a Stack stalled): written at once, on
  the caller's thread, so the reconciler knows it landed before it returns.
- ``publish`` — live progress: the newest intent per Stack replaces any older one still
  pending (coalescing), and the writer's own thread writes it, at most once per
  ``min_interval`` per Stack. The engine's event stream never waits on the API.

An ``update`` first drops the Stack's pending progress and waits for a progress write in
flight, so a late progress write can never overwrite a conclusion.

API outages. Each API call gets the short in-call retries of ``controller.retry`` (up to
``retry_budget`` seconds). Beyond that:

- ``update`` keeps trying, backing off from 0.2 s to 10 s on the clock, until the conclusion
  lands, the object is gone (404) or the writer is closed: a transient failure (connection
  error, 429, 5xx, a 401/403 just after one) never loses an outcome. A conflict on the way
  still re-reads the object and applies ``mutate`` to fresh data. A status too large to
  store is not transient: ``StatusTooLargeError``, so that the caller can write a smaller
  one.
- The progress thread survives any exception: it logs, backs off (0.2 s doubling to 10 s),
  and keeps a transiently failed intent pending until it lands or a newer one replaces it.
  ``alive()`` says whether it still runs (for ``/healthz``).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from typing import Any, Literal, ParamSpec, TypeVar, cast

import structlog
from kubernetes import client
from prometheus_client import CollectorRegistry, Counter

from controller.cache import Object, ObjectKey, resource_version, thaw
from controller.clock import Clock, RealClock
from controller.objectsapi import ObjectsApi
from controller.retry import MAX_DELAY, is_transient, request_too_large, retrying
from controller.view import ReadYourWritesView
from status.conditions import without_stale_stall

log = structlog.get_logger(__name__)

P = ParamSpec("P")
T = TypeVar("T")
Mutation = Callable[[Mapping[str, Any]], dict[str, Any]]
MAX_CONFLICT_RETRIES = 5
MIN_PUBLISH_INTERVAL = 5.0  # seconds between two progress writes of one Stack
OUTAGE_BACKOFF = (0.2, 10.0)  # seconds: first and longest wait between two failed writes
RETRY_LOG_INTERVAL = 5.0  # seconds between two log lines about the same failing writes


class StatusTooLargeError(client.ApiException):
    """The status is too large for the API server to store; writing it again cannot help.

    The apiserver answered 413 (its request body limit) or 500 "etcdserver: request is too
    large" (etcd's request limit). A smaller status can be written.
    """

    @classmethod
    def of(cls, err: client.ApiException) -> StatusTooLargeError:
        """The same answer as ``err``, as this type."""
        new = cls(status=err.status, reason=err.reason, body=err.body)
        new.headers = err.headers
        return new


class _Backoff:
    """Waits doubling from ``OUTAGE_BACKOFF[0]`` to ``OUTAGE_BACKOFF[1]`` seconds."""

    def __init__(self) -> None:
        self._next = OUTAGE_BACKOFF[0]

    def next(self) -> float:
        """The next wait."""
        wait, self._next = self._next, min(self._next * 2, OUTAGE_BACKOFF[1])
        return wait

    def reset(self) -> None:
        """Start again from the shortest wait."""
        self._next = OUTAGE_BACKOFF[0]


class _Throttle:
    """Says yes at most once per ``RETRY_LOG_INTERVAL`` seconds (the first time at once)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._next: float | None = None

    def due(self) -> bool:
        """True if the last yes was long enough ago."""
        now = self._clock.now()
        if self._next is not None and now < self._next:
            return False
        self._next = now + RETRY_LOG_INTERVAL
        return True


@dataclasses.dataclass
class _Write:
    """One intent on its way to the API, across retries."""

    mutate: Mutation
    before: dict[str, Any] | None = None
    """The status when the first attempt was computed."""
    maybe_landed: bool = False
    """A PATCH failed after it may have been applied (the answer, not the request, was lost)."""
    failures: int = 0
    returned: Mapping[str, Any] | None = None
    """The object the last successful PATCH returned, as the API answered it."""


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The RFC 7386 merge patch turning ``old`` into ``new`` (lists are replaced whole)."""
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            nested = merge_patch(before, value)
            if nested:
                patch[key] = nested
        elif key not in old or before != value:
            patch[key] = thaw(value)
    return patch


def _answer_lost(err: Exception) -> bool:
    """Whether a failed request may have been applied: no 4xx answer says it was not."""
    if isinstance(err, client.ApiException):
        return not 400 <= (err.status or 0) < 500
    return True  # a reset connection or a timeout may have delivered the request


class StatusWriter:
    """Writes ``/status`` of one custom resource kind; see the module docstring."""

    def __init__(  # noqa: PLR0913 - the resource's coordinates are four plain strings
        self,
        api_client: client.ApiClient,
        view: ReadYourWritesView,
        group: str,
        version: str,
        plural: str,
        registry: CollectorRegistry,
        *,
        on_written: Callable[[Mapping[str, Any], Mapping[str, Any]], None] | None = None,
        min_interval: float = MIN_PUBLISH_INTERVAL,
        clock: Clock | None = None,
        retry_budget: float = MAX_DELAY,
        field_manager: str | None = None,
    ) -> None:
        """Write through ``api_client``; read objects through ``view``, record writes in it.

        Every PATCH is recorded under ``field_manager`` in the object's ``managedFields``
        (None: the API server's default, the client's user agent).

        ``on_written(old_status, new_status)`` runs after each successful write (metrics).
        ``min_interval`` spaces the progress writes of one Stack (``publish``).
        ``retry_budget`` bounds the in-call retries of one API call, in seconds.
        Intervals and backoff are measured on ``clock``.
        """
        self._on_written = on_written
        self._min_interval = min_interval
        self._clock: Clock = clock or RealClock()
        self._retry_budget = retry_budget
        self._field_manager = field_manager
        self._closing = threading.Event()
        self._resume_at = float("-inf")  # the progress thread backs off until then
        self._pending: dict[ObjectKey, Mutation] = {}
        self._last_published: dict[ObjectKey, float] = {}
        self._key_locks: dict[ObjectKey, threading.Lock] = {}
        self._wake = threading.Condition(threading.Lock())
        self._closed = False
        self._thread: threading.Thread | None = None
        self._api = ObjectsApi(api_client)
        self._view = view
        self._gvp = (group, version, plural)
        self._lock = threading.Lock()
        self._patches = Counter(
            "pulumi_stack_status_patches_total",
            "Status subresource PATCH calls made by the operator, by result "
            "(written, conflict, error); an idle Stack makes none.",
            ["result"],
            registry=registry,
        )
        for result in ("written", "conflict", "error"):
            self._patches.labels(result)

    def current(self, key: ObjectKey) -> Object | None:
        """The newest copy of the object known here (cache or a write): ``view.get(key)``.

        A thin delegate kept for callers that hold only the writer; read the view directly.
        """
        return self._view.get(key)

    def forget(self, key: ObjectKey) -> None:
        """Drop what we remember of a deleted object, including pending progress.

        The view forgets its written copy too.
        """
        self.discard(key)
        self._view.forget(key)
        with self._lock:
            self._key_locks.pop(key, None)
        with self._wake:
            self._last_published.pop(key, None)

    def publish(self, key: ObjectKey, mutate: Mutation) -> None:
        """Queue a progress intent; it replaces the Stack's pending one. Never blocks.

        The writer's thread applies the newest intent once ``min_interval`` has passed
        since the Stack's last progress write. Failures are logged, never raised.
        """
        with self._wake:
            if self._closed:
                return
            self._pending[key] = mutate
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._publish_loop, name="status-writer", daemon=True
                )
                self._thread.start()
            self._wake.notify()

    def discard(self, key: ObjectKey) -> None:
        """Drop the Stack's pending progress intent, if any."""
        with self._wake:
            self._pending.pop(key, None)

    def pending(self) -> int:
        """How many Stacks have a progress intent waiting to be written."""
        with self._wake:
            return len(self._pending)

    def alive(self) -> bool:
        """False only if the progress thread died while the writer is open (for /healthz)."""
        with self._wake:
            thread, closed = self._thread, self._closed
        return closed or thread is None or thread.is_alive()

    def close(self, timeout: float = 5.0) -> bool:
        """Stop the progress thread, dropping what is pending; True if it ended in time.

        An ``update`` still retrying gives up and raises its last error.
        """
        with self._wake:
            self._closed = True
            self._closing.set()
            self._pending.clear()
            self._wake.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def update(self, key: ObjectKey, mutate: Mutation) -> bool:
        """Apply ``mutate`` to the status and write the difference; False if nothing changed.

        ``mutate`` receives a plain, mutable copy of the newest status (never the cache's).

        Drops the Stack's pending progress first (a conclusion supersedes it) and waits
        for a progress write in flight. Transient failures are retried until the write
        lands, however long the API is unavailable (see the module docstring).

        Raises:
            StatusTooLargeError: the new status is too large for the API server to store.
            kubernetes.client.ApiException: the write failed for a reason that is not
                transient, or conflicts persisted.
            Exception: the last transient error, once the writer is closed.
        """
        self.discard(key)
        with self._key_lock(key):
            return self._update_until_landed(key, _Write(mutate))

    def _key_lock(self, key: ObjectKey) -> threading.Lock:
        with self._lock:
            return self._key_locks.setdefault(key, threading.Lock())

    def _update_until_landed(self, key: ObjectKey, write: _Write) -> bool:
        backoff, throttle = _Backoff(), _Throttle(self._clock)
        while True:
            try:
                return self._update(key, write)
            except Exception as err:
                if self._closing.is_set() or not is_transient(err):
                    raise
                wait = backoff.next()
                if throttle.due():
                    log.warning(
                        "Writing status failed; retrying until it lands",
                        key=str(key),
                        failures=write.failures,
                        wait=wait,
                        error=str(err),
                    )
                if self._clock.wait_event(self._closing, self._clock.now() + wait):
                    raise

    def _publish_loop(self) -> None:
        backoff, throttle = _Backoff(), _Throttle(self._clock)
        while (work := self._next_due()) is not None:
            key, mutate = work
            try:
                self._publish_one(key, mutate)
            except Exception as err:  # noqa: BLE001 - no failure may end this thread
                self._progress_failed(key, mutate, err, backoff.next(), throttle)
            else:
                backoff.reset()

    def _publish_one(self, key: ObjectKey, mutate: Mutation) -> None:
        with self._key_lock(key):
            with self._wake:  # an update may have superseded it while we waited
                if self._pending.get(key) is not mutate:
                    return
                self._last_published[key] = self._clock.now()
            self._update(key, _Write(mutate))
            self._settle(key, mutate)

    def _settle(self, key: ObjectKey, mutate: Mutation) -> None:
        """Drop ``mutate`` from the pending intents unless a newer one replaced it."""
        with self._wake:
            if self._pending.get(key) is mutate:
                del self._pending[key]

    def _progress_failed(
        self, key: ObjectKey, mutate: Mutation, err: Exception, wait: float, throttle: _Throttle
    ) -> None:
        """Progress is best effort: keep a transiently failed intent, pause the thread."""
        transient = is_transient(err)
        if not transient:
            self._settle(key, mutate)
        with self._wake:
            self._resume_at = self._clock.now() + wait
        if throttle.due():
            log.warning(
                "Writing progress failed",
                key=str(key),
                error=str(err),
                error_type=type(err).__name__,
                will_retry=transient,
                wait=wait,
                exc_info=not isinstance(err, client.ApiException) and not transient,
            )

    def _next_due(self) -> tuple[ObjectKey, Mutation] | None:
        """Block until some Stack's progress is due; None once closed."""
        with self._wake:
            while not self._closed:
                now = self._clock.now()
                if now < self._resume_at:  # backing off after a failure
                    self._clock.wait_until(self._wake, self._resume_at)
                    continue
                key, wait = self._first_due(now)
                if key is not None:
                    return key, self._pending[key]
                self._clock.wait_until(self._wake, None if wait is None else now + wait)
            return None

    def _first_due(self, now: float) -> tuple[ObjectKey | None, float | None]:
        """A Stack whose progress is due, else None and how long until one is (None: never)."""
        wait: float | None = None
        for key in self._pending:
            due = self._last_published.get(key, -self._min_interval) + self._min_interval
            if due <= now:
                return key, None
            wait = due - now if wait is None else min(wait, due - now)
        return None, wait

    def _update(self, key: ObjectKey, write: _Write) -> bool:
        obj = self.current(key)
        for _ in range(MAX_CONFLICT_RETRIES):
            if obj is None:
                return False
            old: dict[str, Any] = thaw(obj.get("status") or {})
            if write.before is None:
                write.before = old
            generation = int((obj.get("metadata") or {}).get("generation") or 0)
            new = without_stale_stall(write.mutate(old), generation, self._clock.wall(), old)
            patch = merge_patch(old, new)
            if not patch:
                return self._landed_before(write, old)
            result = self._try_patch(key, obj, patch, write)
            if result == "conflict":
                obj = self._fresh(key)
                continue
            if result == "written" and self._on_written is not None:
                self._on_written(old, (write.returned or {}).get("status") or {})
            return result == "written"
        msg = f"status of {key} kept conflicting"
        raise client.ApiException(status=409, reason=msg)

    def _try_patch(
        self, key: ObjectKey, obj: Mapping[str, Any], patch: dict[str, Any], write: _Write
    ) -> Literal["written", "conflict", "gone"]:
        """PATCH once (with in-call retries) and count the result; raise what is not 409/404."""
        try:
            self._patch(key, obj, patch, write)
        except client.ApiException as err:
            if err.status == 404:
                return "gone"
            if err.status == 409:
                self._patches.labels("conflict").inc()
                return "conflict"
            self._patches.labels("error").inc()
            if request_too_large(err):
                raise StatusTooLargeError.of(err) from err
            raise
        except Exception:
            self._patches.labels("error").inc()
            raise
        self._patches.labels("written").inc()
        return "written"

    def _landed_before(self, write: _Write, current: dict[str, Any]) -> bool:
        """Nothing left to write: did an earlier attempt whose answer was lost write it?"""
        if not write.maybe_landed or write.before == current:
            return False
        if self._on_written is not None:
            self._on_written(write.before or {}, current)
        return True

    def _call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` with in-call retries, cut short when the writer closes."""
        policy = retrying(max_delay=self._retry_budget, interrupt=self._closing, clock=self._clock)
        result: T = policy(fn, *args, **kwargs)
        return result

    def _patch(
        self, key: ObjectKey, obj: Mapping[str, Any], patch: dict[str, Any], write: _Write
    ) -> None:
        group, version, plural = self._gvp
        body = {"metadata": {"resourceVersion": resource_version(obj)}, "status": patch}

        def send() -> object:
            try:
                return self._api.patch_namespaced_custom_object_status(
                    group,
                    version,
                    key.namespace,
                    plural,
                    key.name,
                    body,
                    field_manager=self._field_manager,
                )
            except Exception as err:
                write.failures += 1
                write.maybe_landed |= _answer_lost(err)
                raise

        write.returned = cast("Mapping[str, Any]", self._call(send))
        self._view.observe(write.returned)

    def _fresh(self, key: ObjectKey) -> Mapping[str, Any] | None:
        group, version, plural = self._gvp
        try:
            fresh = self._call(
                self._api.get_namespaced_custom_object,
                group, version, key.namespace, plural, key.name,
            )  # fmt: skip
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise
        return cast("Mapping[str, Any]", fresh)
