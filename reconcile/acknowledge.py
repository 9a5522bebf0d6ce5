"""Acknowledge a new generation at once, without waiting for a reconcile worker.

A reconcile worker may be busy for minutes in a Pulumi run; meanwhile a new Stack, or a
changed one, would show no sign of having been seen, and kstatus reads a status-less
custom resource as Current. The ``Acknowledger`` is an informer event handler with one
thread of its own: for every Stack whose ``metadata.generation`` is ahead of its
``status.observedGeneration`` it writes one status — ``Reconciling=True``/``Ready=Unknown``
(``Progressing``) with the new ``observedGeneration`` — and nothing else: no Pulumi, no
Events. The reconcile worker's own writes follow when it gets to the Stack.

It never acknowledges a Stack that is being deleted, nor one with a run in flight
(``status.currentUpdate``): a spec change made during a run waits for the run to end, and
its status keeps telling the run's truth meanwhile. ``observedGeneration`` only moves
forward: the mutation does nothing when the status has already seen the generation.

The thread outlives any failure of an acknowledgment (the API server away, a bug): it is
logged once per streak (``controller.failures.FailureStreak``), the thread backs off on
its clock before the next Stack, and a Stack whose write may pass later
(``controller.failures.retryable``) is offered again, keeping its first times.

Each acknowledgment logs its legs at debug level (``Acknowledged``, milliseconds):
``delivery_ms`` (the watch event received, to the handler offering it), ``queued_ms``
(offered, to this thread taking it), ``write_ms`` (reading the newest status, the
mutation and the PATCH until it returned) and ``total_ms``. A Stack offered again while
pending keeps its first times, so a sample is never shorter than what the user waited.
"""

from __future__ import annotations

import dataclasses
import datetime
import threading
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from controller.cache import Object, ObjectKey
from controller.clock import Clock, RealClock
from controller.failures import FailureStreak, retryable
from controller.informer import DeletedFinalStateUnknown, received_at
from reconcile.collaborators import ObjectView, StatusSink
from reconcile.context import Mutation
from status import conditions as cond

log = structlog.get_logger(__name__)


def acknowledgment(generation: int, now: datetime.datetime) -> Mutation:
    """A status mutation recording ``generation`` as seen.

    A no-op once the status has seen it, or while a run is in flight.
    """
    message = f"Reconciling generation {generation}"

    def apply(status: Mapping[str, Any]) -> dict[str, Any]:
        seen = int(status.get("observedGeneration") or 0) >= generation
        if seen or status.get("currentUpdate"):
            return dict(status)
        return cond.progressing(status, generation, message, now)

    return apply


def pending_generation(obj: Mapping[str, Any]) -> int | None:
    """The generation to acknowledge for ``obj``, or None when there is nothing to do."""
    metadata = obj.get("metadata") or {}
    status = obj.get("status") or {}
    generation = int(metadata.get("generation") or 0)
    if metadata.get("deletionTimestamp") or status.get("currentUpdate"):
        return None
    return generation if int(status.get("observedGeneration") or 0) < generation else None


class Acknowledger:
    """An informer event handler writing acknowledgments on its own thread."""

    def __init__(
        self,
        writer: StatusSink,
        view: ObjectView,
        *,
        active: Callable[[], bool],
        clock: Clock | None = None,
    ) -> None:
        """Read through ``view`` and write through ``writer``, only while ``active()``.

        ``active()``: this replica runs the workers (with leader election: it leads).
        Acknowledgments are stamped with ``clock.wall()``.
        """
        self._writer, self._view, self._active = writer, view, active
        self._clock: Clock = clock or RealClock()
        self._pending: dict[ObjectKey, _Offered] = {}
        self._wake = threading.Condition()
        self._closed = False
        self._streak = FailureStreak("acknowledger", self._clock)
        self._thread = threading.Thread(target=self._loop, name="acknowledger", daemon=True)
        self._thread.start()

    def on_add(self, obj: Object) -> None:
        """Queue a new Stack that has not been acknowledged."""
        self._offer(obj)

    def on_update(self, old: Object, new: Object) -> None:  # noqa: ARG002 - the handler protocol
        """Queue a Stack whose generation moved ahead of its status."""
        self._offer(new)

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        """Nothing to acknowledge for a deleted Stack (a pending key finds it gone)."""

    def alive(self) -> bool:
        """Whether the thread runs (false after ``close``)."""
        return self._thread.is_alive()

    def close(self, timeout: float = 5.0) -> bool:
        """Stop the thread, dropping what is pending; True if it ended in time."""
        with self._wake:
            self._closed = True
            self._pending.clear()
            self._wake.notify()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _offer(self, obj: Object) -> None:
        if pending_generation(obj) is None:
            return
        now = self._clock.now()
        offered = _Offered(received_at() or now, now)
        with self._wake:
            self._pending.setdefault(ObjectKey.of(obj), offered)
            self._wake.notify()

    def _next(self) -> tuple[ObjectKey, _Offered] | None:
        with self._wake:
            while not self._pending and not self._closed:
                self._wake.wait()
            if self._closed:
                return None
            key = next(iter(self._pending))
            return key, self._pending.pop(key)

    def _loop(self) -> None:
        while (work := self._next()) is not None:
            key, offered = work
            try:
                self._acknowledge(key, offered)
            except Exception as err:  # noqa: BLE001 - one Stack's failure must not end the thread
                self._failed(key, offered, err)
            else:
                self._streak.succeeded()

    def _failed(self, key: ObjectKey, offered: _Offered, err: Exception) -> None:
        """Log (once per streak), offer ``key`` again if it may pass, back off."""
        # No traceback for a client failure: the streak logs one only for a bug.
        delay = self._streak.failed(err, key=str(key))
        with self._wake:
            if retryable(err) and not self._closed:
                self._pending.setdefault(key, offered)
            resume_at = self._clock.now() + delay
            while not self._closed and self._clock.now() < resume_at:
                self._clock.wait_until(self._wake, resume_at)

    def _acknowledge(self, key: ObjectKey, offered: _Offered) -> None:
        taken = self._clock.now()
        obj = self._view.get(key)
        generation = None if obj is None else pending_generation(obj)
        if generation is None or not self._active():
            return
        self._writer.update(key, acknowledgment(generation, self._clock.wall()))
        done = self._clock.now()
        log.debug(
            "Acknowledged",
            key=str(key),
            generation=generation,
            delivery_ms=_ms(offered.offered - offered.received),
            queued_ms=_ms(taken - offered.offered),
            write_ms=_ms(done - taken),
            total_ms=_ms(done - offered.received),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class _Offered:
    """When a pending Stack's watch event was received and when it was offered."""

    received: float
    offered: float


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)
