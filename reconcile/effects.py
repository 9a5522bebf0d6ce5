"""Execute a verdict: one status write, at most one Event, then the pass's result.

``Effects.execute(at, verdict)`` is the only place the reconciler writes conditions and
posts Events. The write applies, to the newest status, in one mutation: the caller's own
fields (``also``: ``lastUpdate``, ``currentUpdate``…), the end of the run in flight
(``ends_run``), the handled reconcile request (``handles_request``, status contract rule
17) and the verdict's conditions for the pass's generation. A write the API server refuses
as too large is written again without outputs, history and progress (``report.minimal``),
so that a conclusion is never lost, and never repeated, because of its size.

An Event marked ``on_change`` is posted only when the write changed the status and the
verdict's headline condition (Stalled for a stall, else Ready) had another reason at the
start of the pass; every other Event is posted each time.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

import structlog

from controller.clock import Clock
from controller.reconciler import Result, TransientError
from reconcile import report
from reconcile.collaborators import EventPoster, StatusSink
from reconcile.context import Mutation, Pass
from reconcile.verdict import Verdict
from status import conditions as cond
from status.writer import StatusTooLargeError

log = structlog.get_logger(__name__)


class Effects:
    """Executes verdicts through the status writer and the Event recorder."""

    def __init__(self, writer: StatusSink, events: EventPoster, clock: Clock) -> None:
        """Write through ``writer``, post through ``events``, stamp with ``clock.wall()``."""
        self._writer, self._events, self._clock = writer, events, clock

    def execute(
        self,
        at: Pass,
        verdict: Verdict,
        *,
        also: Mutation | None = None,
        now: datetime.datetime | None = None,
    ) -> Result:
        """Write and post what ``verdict`` says (``also``: more fields; ``now``: its time).

        Raises:
            TransientError: the verdict says to retry with the queue's backoff.
        """
        changed = self.write(at, verdict, also=also, now=now)
        self._notify(at, verdict, changed=changed)
        if verdict.retry_error is not None:
            raise TransientError(verdict.retry_error)
        return Result(requeue_after=verdict.requeue_after)

    def write(
        self,
        at: Pass,
        verdict: Verdict,
        *,
        also: Mutation | None = None,
        now: datetime.datetime | None = None,
    ) -> bool:
        """Write ``verdict``'s status only; True when the status changed."""
        conditions = verdict.conditions
        if conditions is None and also is None:
            return False
        stamp = now or self._clock.wall()

        def apply(status: Mapping[str, Any]) -> dict[str, Any]:
            new = also(status) if also is not None else dict(status)
            if verdict.ends_run:
                new.pop("currentUpdate", None)
                new.pop("progress", None)
            if verdict.handles_request:
                at.requests.mark_handled(new)
            if conditions is not None:
                new = conditions.apply(new, at.generation, stamp)
            return new

        try:
            return self._writer.update(at.key, apply)
        except StatusTooLargeError:
            log.warning("The status was too large for the apiserver; writing a minimal one")
            return self._writer.update(at.key, lambda status: report.minimal(apply(status)))

    def _notify(self, at: Pass, verdict: Verdict, *, changed: bool) -> None:
        notice = verdict.event
        if notice is None:
            return
        if notice.on_change and verdict.conditions is not None:
            headline = verdict.conditions.headline
            before = cond.get_condition(at.status, headline) or {}
            if not changed or before.get("reason") == verdict.conditions.reason:
                return
        self._events.post(at.obj, notice.type_, notice.reason, notice.message)
