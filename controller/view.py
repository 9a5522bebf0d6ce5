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

Gone objects stay gone. A write answered after the informer delivered the object's delete
(the delete raced the write's answer) is not recorded: the view keeps, per recently gone
key, the resourceVersion of its delete (a tombstone) and ignores any written copy not
newer; an add or update of the key in the cache clears it. With a label selector
(``selects``), a written copy whose labels no longer match is not recorded either: the
object has left this process's selection, and must not come back through its own write.

Objects are frozen on the way in, as the cache's are (``controller.cache.freeze``):
whatever ``get`` returns is read-only. All methods are thread-safe.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final

from controller.cache import Object, ObjectKey, Store, freeze_object, resource_version
from controller.informer import DeletedFinalStateUnknown

TOMBSTONES: Final = 4096
"""How many gone keys the view remembers (the oldest forgotten first); a late answer to a
write comes within seconds, long before that many other objects have gone."""


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
    returned that the cache had not yet caught up with when last looked at, newer than the
    key's tombstone, if any, and selected; ``_gone`` holds at most ``TOMBSTONES`` keys.
    """

    def __init__(
        self, store: Store, selects: Callable[[Mapping[str, Any]], bool] | None = None
    ) -> None:
        """Read cached objects from ``store`` (the informer's cache, written only by it).

        ``selects``: whether an object is this process's to manage (the informer's label
        selector); None: every object is.
        """
        self._store = store
        self._selects = selects
        self._lock = threading.Lock()
        self._written: dict[ObjectKey, Object] = {}
        self._gone: collections.OrderedDict[ObjectKey, int] = collections.OrderedDict()

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
        returned: writes answered out of order never move the view back. Neither is an
        object recorded that is not newer than its key's delete, nor one that ``selects``
        refuses (it is returned, and the key's written copy is dropped).
        """
        frozen = freeze_object(obj)
        key = ObjectKey.of(frozen)
        with self._lock:
            if self._selects is not None and not self._selects(frozen):
                self._written.pop(key, None)
                return frozen
            gone = self._gone.get(key)
            if gone is not None and _version(frozen) <= gone:
                return frozen
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
        """The key is back in the cache: its tombstone goes (the cache's copy is newer)."""
        self._revive(ObjectKey.of(obj))

    def on_update(self, old: Object, new: Object) -> None:
        """``get`` compares versions with the store's copy; a tombstone, if any, goes."""
        del old
        self._revive(ObjectKey.of(new))

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        """The object is gone: drop its written copy, so ``get`` answers None.

        A tombstone is kept, so that a write answered late cannot bring it back.
        """
        final = obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj
        key = obj.key if isinstance(obj, DeletedFinalStateUnknown) else ObjectKey.of(obj)
        with self._lock:
            self._written.pop(key, None)
            self._gone.pop(key, None)
            self._gone[key] = _version(final)
            while len(self._gone) > TOMBSTONES:
                self._gone.popitem(last=False)

    def _revive(self, key: ObjectKey) -> None:
        if self._gone:  # most events are of keys never deleted: no lock for them
            with self._lock:
                self._gone.pop(key, None)

    def __len__(self) -> int:
        """How many written copies the view holds (the cache has not caught up with)."""
        with self._lock:
            return len(self._written)
