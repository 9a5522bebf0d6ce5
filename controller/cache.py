"""The informer's local cache: a thread-safe store of read-only objects.

Objects are kept keyed by ``ObjectKey(namespace, name)`` with a namespace index. Every
stored object is frozen on the way in (dicts become read-only mappings, lists become
tuples), so a caller can never mutate the cache by accident — client-go's rule
"NEVER modify objects from the store" is enforced here, not hoped for. ``thaw`` makes a
mutable deep copy for callers that need one.

The cache is written only by the informer; everyone else reads.
"""

from __future__ import annotations

import dataclasses
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


def freeze(value: Any) -> Any:  # noqa: ANN401 - any JSON value
    """Return a read-only deep copy of a JSON value (mappings and tuples all the way down)."""
    if isinstance(value, Mapping):
        return types.MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


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
        """Store a frozen copy of ``obj``; returns (previous, stored)."""
        frozen: Object = freeze(obj)
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
        self, objects: Iterable[Mapping[str, Any]], namespace: str | None
    ) -> tuple[list[tuple[Object | None, Object]], list[Object]]:
        """Make the store's contents (within ``namespace``, or all) equal ``objects``.

        Returns the upserts as (previous, stored) pairs and the objects that vanished: a
        relist after a watch gap reports deletes the watch never delivered.
        """
        upserts = [self.upsert(obj) for obj in objects]
        listed = {ObjectKey.of(stored) for _, stored in upserts}
        gone = [k for k in self.keys(namespace) if k not in listed]
        deleted = [old for k in gone if (old := self.delete(k)) is not None]
        return upserts, deleted

    def _keys(self, namespace: str | None) -> Iterable[ObjectKey]:
        if namespace is None:
            return self._items.keys()
        return self._by_namespace.get(namespace, set())
