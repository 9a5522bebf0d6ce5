"""Interrupting a Stack's run in flight when the Stack is deleted: an informer handler.

A run registers itself (``running(key)``) and gets an event; the informer's add, update or
delete of a Stack carrying a ``deletionTimestamp`` sets that event, so the run stops the
way a deadline stops it (the runner interrupts the CLI, or deletes its run pod) instead of
finishing an update of a Stack that is going away. The finalizer then runs
(``destroyOnFinalize``) with nothing else in flight. The handler only sets events: it never
blocks the informer.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from controller.cache import ObjectKey
from controller.informer import DeletedFinalStateUnknown

Object = Mapping[str, Any]


class RunInterrupts:
    """The runs in flight by Stack, and the informer handler that interrupts them."""

    def __init__(self) -> None:
        """No run in flight."""
        self._lock = threading.Lock()
        self._runs: dict[ObjectKey, threading.Event] = {}

    @contextlib.contextmanager
    def running(self, key: ObjectKey) -> Iterator[threading.Event]:
        """Register the Stack's run for the block; the event is set if the Stack is deleted."""
        event = threading.Event()
        with self._lock:
            self._runs[key] = event
        try:
            yield event
        finally:
            with self._lock:
                if self._runs.get(key) is event:
                    del self._runs[key]

    def on_add(self, obj: Object) -> None:
        """Interrupt the Stack's run if the Stack is being deleted."""
        self._check(obj)

    def on_update(self, old: Object, new: Object) -> None:  # noqa: ARG002 - the handler protocol
        """Interrupt the Stack's run if the Stack is being deleted."""
        self._check(new)

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        """Interrupt the Stack's run: the Stack is gone."""
        self._interrupt(obj.key if isinstance(obj, DeletedFinalStateUnknown) else ObjectKey.of(obj))

    def _check(self, obj: Object) -> None:
        if obj.get("metadata", {}).get("deletionTimestamp"):
            self._interrupt(ObjectKey.of(obj))

    def _interrupt(self, key: ObjectKey) -> None:
        with self._lock:
            event = self._runs.get(key)
        if event is not None:
            event.set()
