"""The informer's local cache: a thread-safe store of read-only objects.

Objects are kept keyed by ``ObjectKey(namespace, name)`` with a namespace index. Every
stored object is frozen on the way in (dicts become read-only mappings, lists become
tuples), so a caller can never mutate the cache by accident — client-go's rule
"NEVER modify objects from the store" is enforced here, not hoped for. ``thaw`` makes a
mutable deep copy for callers that need one.

The cache is written only by the informer; everyone else reads.

Stored objects are also kept small, since an operator caches every object it watches
(``freeze_object``):

- ``metadata.managedFields`` is kept in short form: each entry's manager, operation,
  apiVersion, time and subresource, and of its ``fieldsV1`` only the top-level fields it
  owns (``{"f:spec": {}}``) — enough to tell who last wrote which part of the object, a
  fraction of the size (the full field sets mirror the whole object). So a cached object
  must never be written back whole (an update would replace the server's field
  ownership with this short form); writes are patches.
- the ``kubectl.kubernetes.io/last-applied-configuration`` annotation is dropped: a
  client-side ``kubectl apply`` (Argo CD's default) stores a whole copy of the object
  there as a string, which the operator never reads;
- Mapping keys and short strings are interned and every empty mapping is one shared
  object: a thousand objects of one kind repeat the same keys and values.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import types
from collections.abc import Iterable, Mapping
from typing import Any

Object = Mapping[str, Any]
"""A Kubernetes object as stored in the cache: a frozen JSON mapping."""


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class ObjectKey:
    """The identity of a namespaced object; the only thing the work queue holds."""

    namespace: str
    name: str

    def __str__(self) -> str:
        """Render as ``namespace/name``, client-go's key format."""
        return f"{self.namespace}/{self.name}"

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectKey:
        """The key of a Kubernetes object (its metadata's namespace and name)."""
        meta = obj["metadata"]
        return cls(meta.get("namespace", ""), meta["name"])


INTERNED_LENGTH = 64  # strings up to this long are interned when frozen
_EMPTY: Mapping[str, Any] = types.MappingProxyType({})
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_MANAGED_ENTRY_KEYS = ("manager", "operation", "apiVersion", "time", "subresource")


def freeze(value: Any) -> Any:  # noqa: ANN401 - any JSON value
    """Return a read-only deep copy of a JSON value (mappings and tuples all the way down).

    Keys and strings of up to ``INTERNED_LENGTH`` characters are interned; every empty
    mapping is the same object.
    """
    if isinstance(value, Mapping):
        if not value:
            return _EMPTY
        return types.MappingProxyType({sys.intern(k): freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    if isinstance(value, str) and len(value) <= INTERNED_LENGTH:
        return sys.intern(value)
    return value


def freeze_object(obj: Mapping[str, Any]) -> Object:
    """``freeze`` a Kubernetes object kept small: short ``managedFields``, no last-applied.

    See the module docstring; ``obj`` itself is left alone.
    """
    frozen: Object = freeze(drop_last_applied(compact_managed_fields(obj)))
    return frozen


def drop_last_applied(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``obj`` without kubectl's last-applied-configuration annotation (a shallow copy)."""
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    if not isinstance(annotations, Mapping) or LAST_APPLIED not in annotations:
        return obj
    kept = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
    return {**obj, "metadata": {**metadata, "annotations": kept}}  # type: ignore[dict-item]


def compact_managed_fields(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``obj`` with each managedFields entry reduced to who wrote which top-level field.

    A shallow copy where anything changes; ``obj`` itself is left alone.
    """
    metadata = obj.get("metadata")
    entries = metadata.get("managedFields") if isinstance(metadata, Mapping) else None
    if not entries:
        return obj
    short = [_short_entry(entry) for entry in entries if isinstance(entry, Mapping)]
    return {**obj, "metadata": {**metadata, "managedFields": short}}  # type: ignore[dict-item]


def _short_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    kept = {k: entry[k] for k in _MANAGED_ENTRY_KEYS if k in entry}
    fields = entry.get("fieldsV1")
    kept["fieldsV1"] = {name: {} for name in fields} if isinstance(fields, Mapping) else {}
    return kept


def thaw(value: Any) -> Any:  # noqa: ANN401 - any JSON value
    """Return a mutable deep copy (dicts and lists) of a frozen or plain JSON value."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [thaw(v) for v in value]
    return value


def resource_version(obj: Object) -> str:
    """The object's ``metadata.resourceVersion`` ('' when absent)."""
    return str(obj["metadata"].get("resourceVersion", ""))


class Store:
    """Thread-safe map from ObjectKey to a frozen object, with a namespace index.

    Invariants (under ``_lock``): ``_items`` holds every object; ``_by_namespace[ns]`` is
    exactly the set of keys in ``_items`` whose namespace is ``ns`` (no empty sets).
    """

    def __init__(self) -> None:
        """Create an empty store."""
        self._lock = threading.Lock()
        self._items: dict[ObjectKey, Object] = {}
        self._by_namespace: dict[str, set[ObjectKey]] = {}

    def get(self, key: ObjectKey) -> Object | None:
        """The cached object for ``key``, or None."""
        with self._lock:
            return self._items.get(key)

    def objects(self, namespace: str | None = None) -> list[Object]:
        """All cached objects, or those of one namespace, in key order."""
        with self._lock:
            keys = self._keys(namespace)
            return [self._items[k] for k in sorted(keys)]

    def keys(self, namespace: str | None = None) -> list[ObjectKey]:
        """All cached keys, or those of one namespace, sorted."""
        with self._lock:
            return sorted(self._keys(namespace))

    def __len__(self) -> int:
        """The number of cached objects."""
        with self._lock:
            return len(self._items)

    def upsert(self, obj: Mapping[str, Any]) -> tuple[Object | None, Object]:
        """Store a frozen copy of ``obj`` (``freeze_object``); returns (previous, stored)."""
        return self._put(freeze_object(obj))

    def _put(self, frozen: Object) -> tuple[Object | None, Object]:
        key = ObjectKey.of(frozen)
        with self._lock:
            old = self._items.get(key)
            self._items[key] = frozen
            self._by_namespace.setdefault(key.namespace, set()).add(key)
        return old, frozen

    def delete(self, key: ObjectKey) -> Object | None:
        """Remove ``key``; returns the object it held, or None."""
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                keys = self._by_namespace[key.namespace]
                keys.discard(key)
                if not keys:
                    del self._by_namespace[key.namespace]
            return old

    def replace(
        self, objects: Iterable[Object], namespace: str | None
    ) -> tuple[list[tuple[Object | None, Object]], list[Object]]:
        """Make the store's contents (within ``namespace``, or all) equal ``objects``.

        ``objects`` come frozen by ``freeze_object`` (a relist freezes each page as it
        arrives) and are stored as they are. Returns the upserts as (previous, stored)
        pairs and the objects that vanished: a relist after a watch gap reports deletes
        the watch never delivered.
        """
        upserts = [self._put(obj) for obj in objects]
        listed = {ObjectKey.of(stored) for _, stored in upserts}
        gone = [k for k in self.keys(namespace) if k not in listed]
        deleted = [old for k in gone if (old := self.delete(k)) is not None]
        return upserts, deleted

    def _keys(self, namespace: str | None) -> Iterable[ObjectKey]:
        if namespace is None:
            return self._items.keys()
        return self._by_namespace.get(namespace, set())
