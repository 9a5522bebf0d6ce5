"""The contract between the controller machinery and a reconciler.

A reconciler gets a key and a stop event and says what should happen next, by returning
or raising:

- ``Result()``: done; the key's backoff is forgotten.
- ``Result(requeue_after=s)``: done for now, look again in ``s`` seconds (a poll or a
  resync); the backoff is forgotten.
- raise ``TransientError``: retry with the key's exponential backoff (5 ms doubling,
  capped at ``max_backoff`` seconds when given, else 1000 s).
- raise ``TerminalError``: the spec cannot succeed as it is; no retry until the object
  changes (the reconciler has reported Stalled).
- any other exception: a bug; logged with its traceback and retried like a transient error.

``process_next_work_item`` in ``controller.workers`` is the one place that turns these
into queue actions.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Protocol

from controller.cache import ObjectKey


@dataclasses.dataclass(frozen=True, slots=True)
class Result:
    """A finished reconcile; ``requeue_after`` seconds asks for another look."""

    requeue_after: float | None = None


class TransientError(Exception):
    """A failure that may go away by itself: retry with backoff."""

    def __init__(self, message: str, *, max_backoff: float | None = None) -> None:
        """``max_backoff`` caps this key's backoff in seconds (e.g. a Stack's setting)."""
        super().__init__(message)
        self.max_backoff = max_backoff


class TerminalError(Exception):
    """A failure that needs a change to the object (or what it references) to go away."""


class Reconciler(Protocol):
    """Brings the world in line with one object's spec."""

    def reconcile(self, key: ObjectKey, stop: threading.Event) -> Result:
        """Reconcile ``key``; must return soon after ``stop`` is set.

        Raises:
            TransientError: retry with backoff.
            TerminalError: do not retry until the object changes.
        """
        ...
