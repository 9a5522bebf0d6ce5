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
"""

from __future__ import annotations

import threading
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
    ) -> None:
        """Write through ``api_client``; read current objects from ``store``.

        ``on_written(old_status, new_status)`` runs after each successful write (metrics).
        """
        self._on_written = on_written
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
        """Drop what we remember of a deleted object."""
        with self._lock:
            self._written.pop(key, None)

    def update(self, key: ObjectKey, mutate: Mutation) -> bool:
        """Apply ``mutate`` to the status and write the difference; False if nothing changed.

        ``mutate`` receives a plain, mutable copy of the newest status (never the cache's).

        Raises:
            kubernetes.client.ApiException: the write failed for a reason other than a
                conflict (after in-call retries of transient errors), or conflicts persisted.
        """
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
