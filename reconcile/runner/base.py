"""The ``Runner`` interface: what the reconciler asks of whatever runs Pulumi for it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from reconcile.automation import Outcome, Progress, UpdateRequest

ProgressCallback = Callable[[Progress], None]


class Runner(Protocol):
    """Runs Pulumi operations for Stacks; one operation per stack at a time.

    Every operation returns an ``Outcome`` (never raises for a failed run: the failure is
    classified in ``Outcome.error``); ``stop`` interrupts it (the outcome then says so).
    """

    def run(
        self, request: UpdateRequest, *, on_progress: ProgressCallback, stop: threading.Event
    ) -> Outcome:
        """Optionally refresh, then ``up`` (or ``preview`` when ``request.preview``)."""
        ...

    def destroy(
        self, request: UpdateRequest, *, on_progress: ProgressCallback, stop: threading.Event
    ) -> Outcome:
        """Destroy the stack's resources and remove the stack; a missing stack succeeds."""
        ...

    def clear_stale_lock(self, request: UpdateRequest) -> bool:
        """Release the stack's lock if a dead run of this operator left it; True if it did."""
        ...

    def cancel(self, request: UpdateRequest) -> bool:
        """Cancel the stack's update in flight (known to be dead); False if that failed."""
        ...
