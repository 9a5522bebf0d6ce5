"""The read-your-writes view: the newer of the cached and the written copy, by version."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from controller import view as view_module
from controller.cache import ObjectKey, Store
from controller.informer import DeletedFinalStateUnknown
from controller.labels import parse_selector
from controller.view import ReadYourWritesView

KEY = ObjectKey("ns", "s")


def obj(version: str, **status: Any) -> dict[str, Any]:
    """The object ``ns/s`` at ``version`` (a resourceVersion) with ``status``."""
    return {
        "metadata": {"namespace": KEY.namespace, "name": KEY.name, "resourceVersion": version},
        "status": status,
    }


@pytest.fixture
def store() -> Store:
    """An informer cache holding ``ns/s`` at version 5."""
    cache = Store()
    cache.upsert(obj("5", phase="cached"))
    return cache


def test_without_writes_the_view_is_the_cache(store: Store) -> None:
    """Nothing written: ``get`` is the cache's own object, or None for an unknown key."""
    view = ReadYourWritesView(store)
    assert view.get(KEY) is store.get(KEY)
    assert view.get(ObjectKey("ns", "other")) is None


def test_a_newer_write_wins_until_the_cache_catches_up(store: Store) -> None:
    """A written copy newer than the cache is read back; once cached, the cache answers."""
    view = ReadYourWritesView(store)
    kept = view.observe(obj("7", phase="written"))
    assert view.get(KEY) is kept
    assert kept["status"]["phase"] == "written"
    assert len(view) == 1
    store.upsert(obj("7", phase="written"))
    assert view.get(KEY) is store.get(KEY)
    assert len(view) == 0  # dropped once the cache had caught up


def test_an_older_write_loses_to_a_newer_cache(store: Store) -> None:
    """A write the cache has already overtaken (someone wrote after us) is not read back."""
    view = ReadYourWritesView(store)
    view.observe(obj("3", phase="written"))
    assert view.get(KEY) is store.get(KEY)


def test_versions_compare_as_numbers_not_text(store: Store) -> None:
    """Version 10 is newer than 9, although "10" < "9" as text."""
    store.upsert(obj("9", phase="cached"))
    view = ReadYourWritesView(store)
    kept = view.observe(obj("10", phase="written"))
    assert view.get(KEY) is kept


def test_a_version_that_is_not_a_number_never_wins(store: Store) -> None:
    """An unparsable or missing version counts as older than any cached one."""
    view = ReadYourWritesView(store)
    view.observe(obj("not-a-number"))
    assert view.get(KEY) is store.get(KEY)


def test_out_of_order_observations_never_move_the_view_back(store: Store) -> None:
    """Observing an older write after a newer one keeps the newer one."""
    view = ReadYourWritesView(store)
    newer = view.observe(obj("9", phase="newer"))
    assert view.observe(obj("8", phase="older")) is newer
    assert view.get(KEY) is newer


def test_observed_objects_are_frozen_copies(store: Store) -> None:
    """The view keeps a read-only copy: neither the caller's dict nor readers can change it."""
    view = ReadYourWritesView(store)
    written = obj("6", phase="written", conditions=[{"type": "Ready"}])
    kept = view.observe(written)
    written["status"]["phase"] = "changed later"
    assert kept["status"]["phase"] == "written"
    assert kept["status"]["conditions"] == ({"type": "Ready"},)
    with pytest.raises(TypeError):
        kept["status"]["phase"] = "mutated"


def test_forget_drops_the_written_copy_only(store: Store) -> None:
    """After ``forget`` the cache answers again; the cache itself is untouched."""
    view = ReadYourWritesView(store)
    view.observe(obj("6", phase="written"))
    view.forget(KEY)
    view.forget(KEY)  # twice is fine
    assert view.get(KEY) is store.get(KEY)
    assert store.get(KEY) is not None


def test_a_written_copy_outlives_a_cache_that_never_had_the_object() -> None:
    """Written before the informer listed it: the written copy is the only one known."""
    view = ReadYourWritesView(Store())
    kept = view.observe(obj("1"))
    assert view.get(KEY) is kept


def test_concurrent_observers_leave_the_newest_write(store: Store) -> None:
    """Many threads observing versions in any order: the highest version is what remains."""
    view = ReadYourWritesView(store)
    versions = list(range(10, 410))
    start = threading.Barrier(4)

    def observe(mine: list[int]) -> None:
        start.wait()
        for version in mine:
            view.observe(obj(str(version)))
            view.get(KEY)

    threads = [
        threading.Thread(target=observe, args=(versions[i::4][::-1] if i % 2 else versions[i::4],))
        for i in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    newest = view.get(KEY)
    assert newest is not None
    assert newest["metadata"]["resourceVersion"] == str(versions[-1])


@pytest.mark.parametrize("how", ["watched", "found-by-relist"])
def test_a_deleted_object_is_never_served_from_the_last_write(store: Store, how: str) -> None:
    """Once the informer reports the delete, the written copy goes: ``get`` answers None.

    Without it, the last write (newer than the absent cache entry) would bring the object
    back, finalizer and all, for every later pass.
    """
    view = ReadYourWritesView(store)
    written = view.observe(obj("7", phase="written"))
    store.delete(KEY)
    assert view.get(KEY) is written  # the cache alone cannot tell a delete from a lag
    view.on_delete(DeletedFinalStateUnknown(KEY, written) if how == "found-by-relist" else written)
    assert view.get(KEY) is None
    assert len(view) == 0


def labelled(version: str, **labels: str) -> dict[str, Any]:
    """``obj(version)`` with ``labels``."""
    found = obj(version)
    found["metadata"]["labels"] = labels
    return found


def test_a_write_answered_after_the_delete_does_not_bring_the_object_back(store: Store) -> None:
    """The delete came through the watch before our write's answer: that answer is older.

    The view keeps a tombstone with the delete's resourceVersion and ignores any written
    copy that is not newer; an add of the key (it is back in the cache) clears it.
    """
    view = ReadYourWritesView(store)
    store.delete(KEY)
    view.on_delete(obj("8"))
    view.observe(obj("7", phase="answered late"))
    assert view.get(KEY) is None
    assert len(view) == 0
    back = obj("9", phase="back")
    store.upsert(back)
    view.on_add(store.get(KEY))  # type: ignore[arg-type]
    written = view.observe(obj("10", phase="written"))
    assert view.get(KEY) is written


def test_an_update_clears_a_tombstone_too(store: Store) -> None:
    """A key updated in the cache is live again: later writes are read back."""
    view = ReadYourWritesView(store)
    view.on_delete(obj("8"))
    view.on_update(obj("9"), obj("9"))
    store.upsert(obj("9"))
    written = view.observe(obj("10", phase="written"))
    assert view.get(KEY) is written


def test_tombstones_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the newest ``TOMBSTONES`` deletes are remembered; the oldest go first."""
    monkeypatch.setattr(view_module, "TOMBSTONES", 2)
    view = ReadYourWritesView(Store())
    for name in ("a", "b", "c"):
        gone = obj("5")
        gone["metadata"]["name"] = name
        view.on_delete(gone)
    late = obj("4")
    late["metadata"]["name"] = "a"  # forgotten: its late write is recorded
    assert view.observe(late) is view.get(ObjectKey("ns", "a"))
    late["metadata"]["name"] = "c"  # remembered: ignored
    view.observe(late)
    assert view.get(ObjectKey("ns", "c")) is None


def test_with_a_selector_a_written_copy_that_left_it_is_not_kept(store: Store) -> None:
    """Our write's answer shows labels the selector refuses: the object is no longer ours.

    It is returned (the writer records what it wrote) but not kept, and a copy kept before
    is dropped: ``get`` answers from the cache alone, which no longer has it.
    """
    selector = parse_selector("shard=a")
    view = ReadYourWritesView(store, selector.selects)
    kept = view.observe(labelled("6", shard="a"))
    assert view.get(KEY) is kept
    answered = view.observe(labelled("7", shard="b"))
    assert answered["metadata"]["labels"] == {"shard": "b"}
    assert view.get(KEY) is store.get(KEY)  # the cache's (it has not seen the change yet)
    store.delete(KEY)
    assert view.get(KEY) is None
    assert len(view) == 0
