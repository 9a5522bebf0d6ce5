"""A read-your-writes view over the informer's cache.

The informer's cache lags this process's own writes: right after a PATCH returns, the
cache may still hold the object as it was before. Code that reads, decides and writes
again (a status writer computing a merge patch, a reconciler deciding its next step)
must not decide on that stale copy, or it could undo what it just wrote.

``ReadYourWritesView`` remembers the object each write of this process returned
(``observe``) and answers ``get`` with the newer of that object and the cached one, newer
meaning the larger ``metadata.resourceVersion``. Kubernetes calls resource versions
opaque; the apiserver's are etcd revisions, increasing integers, and this view relies on
that (a version that is not an integer counts as older than any other). Once the cache has
caught up with a written object, the view drops it and answers from the cache alone. The
view is also an informer event handler: a delete drops the written copy at once, so a deleted
object is never served again from this process's last write (the manager registers the view
before the workers, so the forgetting happens before the delete's key is queued).

Objects are frozen on the way in, as the cache's are (``controller.cache.freeze``):
whatever ``get`` returns is read-only. All methods are thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from controller.cache import Object, ObjectKey, Store, freeze_object, resource_version
from controller.informer import DeletedFinalStateUnknown


def _version(obj: Object | None) -> int:
    """The resourceVersion as a number; -1 when absent, unparsable or no object."""
    if obj is None:
        return -1
    try:
        return int(resource_version(obj))
    except ValueError:
        return -1


class ReadYourWritesView:
    """The newest of the informer's copy and this process's last write, per key.

    Invariant (under ``_lock``): ``_written`` holds, per key, the newest object a write
    returned that the cache had not yet caught up with when last looked at.
    """

    def __init__(self, store: Store) -> None:
        """Read cached objects from ``store`` (the informer's cache, written only by it)."""
        self._store = store
        self._lock = threading.Lock()
        self._written: dict[ObjectKey, Object] = {}

    def get(self, key: ObjectKey) -> Object | None:
        """The newest copy of the object known here: cached or written; None if neither.

        The written copy wins only if its resourceVersion is greater than the cached
        one's; when the cache has caught up, the written copy is forgotten.
        """
        cached = self._store.get(key)
        with self._lock:
            written = self._written.get(key)
            if written is None:
                return cached
            if _version(written) > _version(cached):
                return written
            if cached is not None:
                del self._written[key]  # the cache has caught up
            return cached

    def observe(self, obj: Mapping[str, Any]) -> Object:
        """Record ``obj``, as a write returned it; returns the copy the view keeps.

        The key is the object's own namespace and name. An object older than one
        already recorded for that key (by resourceVersion) is ignored, and the newer one
        returned: writes answered out of order never move the view back.
        """
        frozen = freeze_object(obj)
        key = ObjectKey.of(frozen)
        with self._lock:
            held = self._written.get(key)
            if held is not None and _version(held) > _version(frozen):
                return held
            self._written[key] = frozen
        return frozen

    def forget(self, key: ObjectKey) -> None:
        """Drop the written copy of ``key`` (the object is gone); the cache is untouched."""
        with self._lock:
            self._written.pop(key, None)

    def on_add(self, obj: Object) -> None:
        """Nothing to do: a cached object is read from the store."""

    def on_update(self, old: Object, new: Object) -> None:
        """Nothing to do: ``get`` compares versions with the store's copy."""

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        """The object is gone: drop its written copy, so ``get`` answers None."""
        key = obj.key if isinstance(obj, DeletedFinalStateUnknown) else ObjectKey.of(obj)
        self.forget(key)

    def __len__(self) -> int:
        """How many written copies the view holds (the cache has not caught up with)."""
        with self._lock:
            return len(self._written)
