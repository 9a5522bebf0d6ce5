"""The status writer: the only code that writes a Stack's ``/status``.

``StatusWriter.update(key, mutate)`` applies ``mutate`` (a pure function, usually from
``status.conditions``) to the newest status this process knows, and writes the result as a
JSON merge patch of just the fields that differ, with the object's ``resourceVersion`` as a
precondition. When nothing differs it writes nothing — an idle Stack costs no API call.
A 409 (someone wrote in between) re-reads the object from the API and applies ``mutate``
again on fresh data. Writes go to the status subresource, so they never bump
``metadata.generation``.

"Newest status": the informer's cache lags our own writes, so the writer remembers the
object each PATCH returned and uses it until the cache has caught up; otherwise a patch
computed against a stale cached status could forget to remove a field written since.

Two kinds of intent reach the writer:

- ``update`` — a conclusion (a run started or ended, a Stack stalled): written at once, on
  the caller's thread, so the reconciler knows it landed before it returns.
- ``publish`` — live progress: the newest intent per Stack replaces any older one still
  pending (coalescing), and the writer's own thread writes it, at most once per
  ``min_interval`` per Stack. The engine's event stream never waits on the API.

An ``update`` first drops the Stack's pending progress and waits for a progress write in
flight, so a late progress write can never overwrite a conclusion.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

import structlog
from kubernetes import client
from prometheus_client import CollectorRegistry, Counter

from controller.cache import ObjectKey, Store, resource_version, thaw
from controller.retry import with_retries

log = structlog.get_logger(__name__)

Mutation = Callable[[Mapping[str, Any]], dict[str, Any]]
MAX_CONFLICT_RETRIES = 5
MIN_PUBLISH_INTERVAL = 5.0  # seconds between two progress writes of one Stack


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


def _rv_number(obj: Mapping[str, Any] | None) -> int:
    try:
        return int(resource_version(obj)) if obj is not None else -1
    except ValueError:
        return -1


class StatusWriter:
    """Writes ``/status`` of one custom resource kind; see the module docstring."""

    def __init__(  # noqa: PLR0913 - the resource's coordinates are four plain strings
        self,
        api_client: client.ApiClient,
        store: Store,
        group: str,
        version: str,
        plural: str,
        registry: CollectorRegistry,
        *,
        on_written: Callable[[Mapping[str, Any], Mapping[str, Any]], None] | None = None,
        min_interval: float = MIN_PUBLISH_INTERVAL,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """Write through ``api_client``; read current objects from ``store``.

        ``on_written(old_status, new_status)`` runs after each successful write (metrics).
        ``min_interval`` spaces the progress writes of one Stack (``publish``).
        """
        self._on_written = on_written
        self._min_interval = min_interval
        self._monotonic = monotonic
        self._pending: dict[ObjectKey, Mutation] = {}
        self._last_published: dict[ObjectKey, float] = {}
        self._key_locks: dict[ObjectKey, threading.Lock] = {}
        self._wake = threading.Condition(threading.Lock())
        self._closed = False
        self._thread: threading.Thread | None = None
        self._api = client.CustomObjectsApi(api_client)
        self._store = store
        self._gvp = (group, version, plural)
        self._written: dict[ObjectKey, Mapping[str, Any]] = {}
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

    def current(self, key: ObjectKey) -> Mapping[str, Any] | None:
        """The newest copy of the object known here (cache or our last write)."""
        cached = self._store.get(key)
        with self._lock:
            written = self._written.get(key)
        if written is not None and _rv_number(written) > _rv_number(cached):
            return written
        return cached

    def forget(self, key: ObjectKey) -> None:
        """Drop what we remember of a deleted object, including pending progress."""
        self.discard(key)
        with self._lock:
            self._written.pop(key, None)
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

    def close(self, timeout: float = 5.0) -> bool:
        """Stop the progress thread, dropping what is pending; True if it ended in time."""
        with self._wake:
            self._closed = True
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
        for a progress write in flight.

        Raises:
            kubernetes.client.ApiException: the write failed for a reason other than a
                conflict (after in-call retries of transient errors), or conflicts persisted.
        """
        self.discard(key)
        with self._key_lock(key):
            return self._update(key, mutate)

    def _key_lock(self, key: ObjectKey) -> threading.Lock:
        with self._lock:
            return self._key_locks.setdefault(key, threading.Lock())

    def _publish_loop(self) -> None:
        while (work := self._next_due()) is not None:
            key, mutate = work
            with self._key_lock(key):
                with self._wake:  # an update may have superseded it while we waited
                    if self._pending.get(key) is not mutate:
                        continue
                    del self._pending[key]
                    self._last_published[key] = self._monotonic()
                try:
                    self._update(key, mutate)
                except client.ApiException as err:  # progress is best effort
                    log.warning("Writing progress failed", key=str(key), error=str(err))

    def _next_due(self) -> tuple[ObjectKey, Mutation] | None:
        """Block until some Stack's progress is due; None once closed."""
        with self._wake:
            while not self._closed:
                now, wait = self._monotonic(), None
                for key, mutate in self._pending.items():
                    due = self._last_published.get(key, -self._min_interval) + self._min_interval
                    if due <= now:
                        return key, mutate
                    wait = due - now if wait is None else min(wait, due - now)
                self._wake.wait(wait)
            return None

    def _update(self, key: ObjectKey, mutate: Mutation) -> bool:
        obj = self.current(key)
        for _ in range(MAX_CONFLICT_RETRIES):
            if obj is None:
                return False
            old: dict[str, Any] = thaw(obj.get("status") or {})
            patch = merge_patch(old, mutate(old))
            if not patch:
                return False
            try:
                self._patch(key, obj, patch)
            except client.ApiException as err:
                if err.status == 404:
                    return False
                if err.status != 409:
                    self._patches.labels("error").inc()
                    raise
                self._patches.labels("conflict").inc()
                obj = self._fresh(key)
                continue
            self._patches.labels("written").inc()
            if self._on_written is not None:
                self._on_written(old, self._status_of(key))
            return True
        msg = f"status of {key} kept conflicting"
        raise client.ApiException(status=409, reason=msg)

    def _status_of(self, key: ObjectKey) -> Mapping[str, Any]:
        with self._lock:
            written = self._written.get(key) or {}
        status: Mapping[str, Any] = written.get("status") or {}
        return status

    def _patch(self, key: ObjectKey, obj: Mapping[str, Any], patch: dict[str, Any]) -> None:
        group, version, plural = self._gvp
        body = {"metadata": {"resourceVersion": resource_version(obj)}, "status": patch}
        written = with_retries(
            self._api.patch_namespaced_custom_object_status,
            group, version, key.namespace, plural, key.name, body,
        )  # fmt: skip
        with self._lock:
            self._written[key] = cast("Mapping[str, Any]", written)

    def _fresh(self, key: ObjectKey) -> Mapping[str, Any] | None:
        group, version, plural = self._gvp
        try:
            fresh = with_retries(
                self._api.get_namespaced_custom_object,
                group, version, key.namespace, plural, key.name,
            )  # fmt: skip
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise
        return cast("Mapping[str, Any]", fresh)
