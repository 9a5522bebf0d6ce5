"""Kubernetes Events about Stacks: client-go's ``tools/record`` recorder, in Python.

``EventRecorder.post(obj, type_, reason, message)`` records a core/v1 Event regarding ``obj``
and returns at once. Callers post only on transitions and on update start/finish; the
recorder adds what client-go's ``EventCorrelator`` adds to every Go controller, with the
same defaults: dedupe into a rising ``count``, aggregation of similar messages, a per-object
spam filter (``status.correlator``, which also says exactly how).

Correlation is in-memory and runs inside ``post()`` under the recorder's lock, with the
injected ``Clock``; only the API writes go to one background thread, through a FIFO queue
bounded at 1000 writes (client-go's broadcaster size). When the queue is full the new event
is dropped, so a slow or unreachable apiserver never blocks a reconcile. Event names are
chosen here (``<object>.<hex nanoseconds>``, as in client-go), so a PATCH can be queued
behind the CREATE it depends on, and a repeated CREATE that meets 409 is known to be ours.

Writes and retries: a repeat is a PATCH of ``count``, ``lastTimestamp`` and ``message``; a
PATCH answered 404 (the Event expired after the apiserver's ``--event-ttl``, 1 h by default)
re-creates the Event under the same name with the current count. Connection errors, 429 and
5xx are tried ``MAX_TRIES`` (4) times in all, waiting a random fraction of
``RETRY_INTERVAL`` (2 s) before the second try and the full interval before later ones
(client-go: 12 tries 10 s apart, which keeps one event in flight for two minutes while newer
ones queue up). Other answers are not retried. Each request times out after
``REQUEST_TIMEOUT`` (10 s). An event that still fails is logged and dropped.

Guarantees: ``post()`` never raises and never waits for the apiserver. Posts from one thread
are written in order. Messages are plain text (``controller.text.plain``: no terminal codes)
cut to 1024 bytes of UTF-8 (so also 1024 characters), reason, action and reporting instance
to 128. Every write carries the recorder's field manager (``fieldManager``). The Event lives
in the object's namespace (``default`` for cluster-scoped objects), its timestamps are aware
UTC (the clock's ``wall()``), and it carries ``source.component`` and ``reportingComponent``
``pulumi-stack-operator``, ``reportingInstance``, ``action`` and a full ``involvedObject``
(apiVersion, kind, name, namespace, uid, resourceVersion). ``eventTime`` is left unset, as
client-go's core/v1 recorder does, which keeps the apiserver's MicroTime parsing out of the
way.

Metrics (in the registry given to the constructor; a private one otherwise):
``pulumi_stack_events_total{type,result}`` counts posts of a valid type by outcome:
``created`` and ``patched`` (written), ``failed`` (the API refused, or retries ran out) and
``dropped`` (never sent). ``pulumi_stack_events_dropped_total{reason}`` says why a post was
not sent: ``rate_limited``, ``queue_full``, ``closed`` or ``invalid`` (a type other than
Normal/Warning, or an object without metadata). No per-object labels. An idle operator
leaves both unchanged.
"""

from __future__ import annotations

import collections
import datetime
import random
import socket
import threading
from collections.abc import Mapping
from typing import Any, Protocol

import structlog
from kubernetes import client
from prometheus_client import CollectorRegistry, Counter

from controller.clock import Clock, RealClock
from controller.coreapi import CoreApi
from controller.failures import CLIENT_FAILURES, FailureStreak
from controller.retry import is_transient
from controller.text import plain, truncate
from status.correlator import EventCorrelator, Occurrence, Write, truncate_message
from status.eventref import ObjectRef

log = structlog.get_logger(__name__)

NORMAL, WARNING = "Normal", "Warning"
COMPONENT = "pulumi-stack-operator"
MAX_FIELD = 128  # reason, action, reportingInstance

QUEUE_SIZE = 1000
MAX_TRIES = 4
RETRY_INTERVAL = 2.0
REQUEST_TIMEOUT = 10.0
DEFAULT_CLOSE_TIMEOUT = 5.0

_MAX_NAME = 253
_STRATEGIC_MERGE = "application/strategic-merge-patch+json"
_WRITTEN = ("created", "patched")
_RESULTS = (*_WRITTEN, "failed", "dropped")
_DROP_REASONS = ("rate_limited", "queue_full", "closed", "invalid")


class EventSink(Protocol):
    """The two core/v1 calls the recorder makes (``controller.coreapi.CoreApi`` has them)."""

    def create_namespaced_event(
        self,
        namespace: str,
        body: client.CoreV1Event,
        *,
        field_manager: str | None,
        _request_timeout: float,
    ) -> object:
        """Create ``body`` in ``namespace`` as ``field_manager``."""
        ...

    def patch_namespaced_event(
        self,
        name: str,
        namespace: str,
        body: dict[str, Any],
        *,
        field_manager: str | None,
        _content_type: str,
        _request_timeout: float,
    ) -> object:
        """Patch the Event ``namespace/name`` with ``body`` as ``field_manager``."""
        ...


class EventRecorder:
    """Correlates Events in ``post()`` and writes them on a background thread.

    ``post()`` never raises and never blocks on the API. ``flush(timeout)`` waits until
    every queued write is done (tests, shutdown). ``close()`` refuses later posts, lets the
    thread finish the queue with one try per write, and joins it. The thread is a daemon,
    so a recorder that is never closed does not keep the process alive.
    """

    def __init__(  # noqa: PLR0913 - the client, then settings, all keyword-only
        self,
        api_client: client.ApiClient | None,
        instance: str | None = None,
        *,
        registry: CollectorRegistry | None = None,
        clock: Clock | None = None,
        sink: EventSink | None = None,
        field_manager: str | None = None,
    ) -> None:
        """Post through ``api_client`` (or ``sink``) as ``pulumi-stack-operator``/``instance``.

        ``instance`` (default: the host name) becomes ``reportingInstance``. ``clock``
        drives the correlation windows, the buckets and the retry waits (``now()``) and
        stamps ``firstTimestamp``/``lastTimestamp`` (``wall()``). Every write is recorded
        under ``field_manager`` in the Event's ``managedFields`` (None: the API server's
        default, the client's user agent).
        """
        if sink is None:
            sink = CoreApi(api_client if api_client is not None else client.ApiClient())
        self._sink: EventSink = sink
        self._field_manager = field_manager
        self._instance = truncate(instance or socket.gethostname(), MAX_FIELD)
        self._clock: Clock = clock if clock is not None else RealClock()
        self._failing = FailureStreak("event-recorder", self._clock)  # writes given up
        self._correlator = EventCorrelator(self._name_for)
        self._last_suffix = 0
        # _cond guards the correlator, _queue (FIFO, at most QUEUE_SIZE writes), _busy (the
        # worker holds a write it took from the queue) and _closed (no more posts).
        self._cond = threading.Condition()
        self._queue: collections.deque[Write] = collections.deque()
        self._busy = False
        self._closed = False
        self._init_metrics(registry if registry is not None else CollectorRegistry())
        self._thread = threading.Thread(target=self._run, name="event-recorder", daemon=True)
        self._thread.start()

    # -- public API ---------------------------------------------------------------------

    def post(
        self,
        obj: Mapping[str, Any],
        type_: str,
        reason: str,
        message: str,
        *,
        action: str | None = None,
    ) -> None:
        """Record an event about ``obj`` (a raw API object); never raises, never blocks.

        ``type_`` is NORMAL or WARNING; ``reason`` a CamelCase reason; ``action`` what the
        operator did (defaults to ``reason``).
        """
        try:
            self._post(obj, type_, reason, message, action)
        except Exception:  # events are auxiliary: a bug here must not fail a reconcile
            log.exception("Recording an event failed", reason=reason, type=type_)

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` real seconds until no write is queued or in flight."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout)

    def alive(self) -> bool:
        """False only when the posting thread died while the recorder is open."""
        with self._cond:
            return self._closed or self._thread.is_alive()

    def close(self, timeout: float = DEFAULT_CLOSE_TIMEOUT) -> bool:
        """Refuse new posts, finish the queue (one try per write); True if the thread ended."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- correlation (caller's thread) --------------------------------------------------

    def _post(
        self, obj: Mapping[str, Any], type_: str, reason: str, message: str, action: str | None
    ) -> None:
        meta = obj.get("metadata")
        if type_ not in (NORMAL, WARNING) or not isinstance(meta, Mapping) or not meta.get("name"):
            log.error("Refusing an invalid event", reason=reason, type=type_)
            self._dropped.labels("invalid").inc()
            return
        occurrence = Occurrence(
            ref=ObjectRef.of(obj),
            type=type_,
            reason=truncate(reason, MAX_FIELD),
            message=truncate_message(plain(message)),
            action=truncate(action or reason, MAX_FIELD),
            stamp=self._clock.wall().astimezone(datetime.UTC),
        )
        with self._cond:
            drop = self._enqueue(occurrence)
        if drop is not None:
            self._drop(occurrence, drop)

    def _enqueue(self, occurrence: Occurrence) -> str | None:
        """Correlate and queue ``occurrence``; return why it was dropped, if it was."""
        if self._closed:
            return "closed"
        if len(self._queue) >= QUEUE_SIZE:
            return "queue_full"
        write = self._correlator.correlate(occurrence, self._clock.now())
        if write is None:
            return "rate_limited"
        self._queue.append(write)
        self._cond.notify_all()
        return None

    def _name_for(self, ref: ObjectRef) -> str:
        """A new Event name, ``<object>.<hex ns>`` like client-go; unique in this process."""
        wall = self._clock.wall()
        nanos = int(wall.timestamp()) * 1_000_000_000 + wall.microsecond * 1000
        suffix = max(nanos, self._last_suffix + 1)
        self._last_suffix = suffix
        tail = f".{suffix:x}"
        return ref.name[: _MAX_NAME - len(tail)].rstrip(".-") + tail

    def _drop(self, occurrence: Occurrence, why: str) -> None:
        self._dropped.labels(why).inc()
        self._events.labels(occurrence.type, "dropped").inc()
        level = log.debug if why == "rate_limited" else log.warning
        level("Dropped an event", why=why, **_fields(occurrence))

    # -- writing (background thread) ----------------------------------------------------

    def _run(self) -> None:
        while (write := self._next()) is not None:
            try:
                self._deliver(write)
            except Exception as err:  # noqa: BLE001 - the worker loop must outlive any one event
                self._events.labels(write.occurrence.type, "failed").inc()
                self._failing.failed(err, outcome="event dropped", **_fields(write.occurrence))
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _next(self) -> Write | None:
        """The next write to send (FIFO); None once closed and drained."""
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            if not self._queue:
                return None
            self._busy = True
            return self._queue.popleft()

    def _deliver(self, write: Write) -> None:
        """Send ``write``, retrying transient failures; count the outcome."""
        for attempt in range(1, MAX_TRIES + 1):
            try:
                result = self._send(write)
            except CLIENT_FAILURES as err:
                if not is_transient(err) or attempt == MAX_TRIES or not self._sleep(attempt):
                    self._give_up(write, err, attempt)
                    return
            else:
                self._events.labels(write.occurrence.type, result).inc()
                self._failing.succeeded()
                return

    def _send(self, write: Write) -> str:
        """One try: PATCH the count of a known Event, else (or if it is gone) CREATE it."""
        if write.count > 1:
            try:
                self._sink.patch_namespaced_event(
                    write.name,
                    write.namespace,
                    _patch_body(write),
                    field_manager=self._field_manager,
                    _content_type=_STRATEGIC_MERGE,
                    _request_timeout=REQUEST_TIMEOUT,
                )
            except client.ApiException as err:
                if err.status != 404:
                    raise
                # Expired (--event-ttl) or deleted: create it again, count and all.
            else:
                return "patched"
        try:
            self._sink.create_namespaced_event(
                write.namespace,
                self._body(write),
                field_manager=self._field_manager,
                _request_timeout=REQUEST_TIMEOUT,
            )
        except client.ApiException as err:
            if err.status != 409:
                raise
            # Names are ours and unique: an earlier try that timed out did create it.
        return "created"

    def _sleep(self, attempt: int) -> bool:
        """Wait before try ``attempt + 1``; False if the recorder closed meanwhile."""
        # Like client-go, the first wait is random so that clients desynchronise.
        jitter = random.random()  # noqa: S311 - jitter, not cryptography
        pause = RETRY_INTERVAL * (jitter if attempt == 1 else 1.0)
        deadline = self._clock.now() + pause
        with self._cond:
            while not self._closed and self._clock.now() < deadline:
                self._clock.wait_until(self._cond, deadline)
            return not self._closed

    def _give_up(self, write: Write, err: BaseException, tries: int) -> None:
        """Drop ``write``: counted always, logged once per streak of failed writes."""
        self._events.labels(write.occurrence.type, "failed").inc()
        self._failing.failed(err, outcome="event dropped", tries=tries, **_fields(write.occurrence))

    def _body(self, write: Write) -> client.CoreV1Event:
        occ = write.occurrence
        return client.CoreV1Event(
            metadata=client.V1ObjectMeta(name=write.name, namespace=write.namespace),
            involved_object=occ.ref.to_model(),
            reason=occ.reason,
            message=occ.message,
            type=occ.type,
            count=write.count,
            first_timestamp=write.first,
            last_timestamp=occ.stamp,
            source=client.V1EventSource(component=COMPONENT),
            reporting_component=COMPONENT,
            reporting_instance=self._instance,
            action=occ.action,
        )

    # -- metrics ------------------------------------------------------------------------

    def _init_metrics(self, registry: CollectorRegistry) -> None:
        self._events = Counter(
            "pulumi_stack_events_total",
            "Events posted by the operator, by type and result (created, patched: written; "
            "failed: refused or out of retries; dropped: never sent).",
            ["type", "result"],
            registry=registry,
        )
        self._dropped = Counter(
            "pulumi_stack_events_dropped_total",
            "Events not sent, by reason (rate_limited, queue_full, closed, invalid).",
            ["reason"],
            registry=registry,
        )
        for type_ in (NORMAL, WARNING):
            for result in _RESULTS:
                self._events.labels(type_, result)
        for why in _DROP_REASONS:
            self._dropped.labels(why)


def _patch_body(write: Write) -> dict[str, Any]:
    """What changes on a repeat: count, lastTimestamp and (when aggregated) the message."""
    return {
        "count": write.count,
        "lastTimestamp": write.occurrence.stamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "message": write.occurrence.message,
    }


def _fields(occ: Occurrence) -> dict[str, str]:
    """Log fields naming an event (never its message, which may be long)."""
    return {
        "type": occ.type,
        "reason": occ.reason,
        "object_kind": occ.ref.kind,
        "object_namespace": occ.ref.namespace,
        "object_name": occ.ref.name,
    }
