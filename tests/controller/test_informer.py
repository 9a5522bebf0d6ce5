"""The reflector lists, watches, relists on 410 and delivers the difference (fake API)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from controller.cache import Object, ObjectKey, Store
from controller.informer import (
    Backoff,
    DeletedFinalStateUnknown,
    ExpiredError,
    Informer,
    Reflector,
    VeryShortWatchError,
    WatchEvent,
)


def obj(name: str, rv: str) -> dict[str, Any]:
    """A minimal object in namespace ns."""
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": rv}}


class FakeListWatcher:
    """Serves scripted list pages and watch streams; a stream may end by raising."""

    namespace: str | None = "ns"

    def __init__(self, exhausted: threading.Event | None = None) -> None:
        """Start with nothing scripted; ``exhausted`` is set when the streams run out."""
        self.exhausted = exhausted or threading.Event()
        self.pages: list[list[Mapping[str, Any]]] = []
        self.current: list[Mapping[str, Any]] = []
        self.streams: list[list[WatchEvent] | Exception] = []
        self.watched_from: list[str] = []

    def list(self, limit: int, continue_token: str | None) -> Mapping[str, Any]:
        """Return the next page; the last one carries resourceVersion 100."""
        del limit
        index = int(continue_token or 0)
        pages = self.pages.pop(0) if index == 0 else self.current
        self.current = pages
        more = index + 1 < len(pages)
        meta: dict[str, Any] = {"resourceVersion": "100"}
        if more:
            meta["continue"] = str(index + 1)
        return {"items": pages[index]["items"], "metadata": meta}

    def watch(self, resource_version: str, timeout_seconds: int) -> Iterator[WatchEvent]:
        """Yield the next scripted stream, or raise its exception."""
        del timeout_seconds
        self.watched_from.append(resource_version)
        if not self.streams:
            self.exhausted.set()
            return
        script = self.streams.pop(0)
        if isinstance(script, Exception):
            raise script
        yield from script

    def stop(self) -> None:
        """Nothing to abort."""


class Recorder:
    """Records handler calls as (kind, name) tuples."""

    def __init__(self) -> None:
        """Start empty."""
        self.calls: list[tuple[str, str]] = []

    def on_add(self, obj: Object) -> None:
        """Record an add."""
        self.calls.append(("add", obj["metadata"]["name"]))

    def on_update(self, old: Object, new: Object) -> None:
        """Record an update (or a resync when old is new)."""
        self.calls.append(("resync" if old is new else "update", new["metadata"]["name"]))

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        """Record a delete; relist-detected ones are marked."""
        if isinstance(obj, DeletedFinalStateUnknown):
            self.calls.append(("delete-unknown", obj.key.name))
        else:
            self.calls.append(("delete", obj["metadata"]["name"]))


def reflector(lw: FakeListWatcher, handler: Recorder) -> Reflector:
    """A reflector over a fresh store."""
    return Reflector(lw, Store(), handler, threading.Event(), clock=lambda: 0.0)


def test_list_pages_are_joined_and_delivered_as_adds() -> None:
    """Every item of every page arrives once, and the watch starts at the list's RV."""
    lw, handler = FakeListWatcher(), Recorder()
    lw.pages = [[{"items": [obj("a", "1")]}, {"items": [obj("b", "2")]}]]
    r = reflector(lw, handler)
    r.list_and_replace()
    assert handler.calls == [("add", "a"), ("add", "b")]
    assert r.last_sync_resource_version == "100"
    assert r.has_synced()


def test_watch_events_update_the_store_and_the_resource_version() -> None:
    """ADDED/MODIFIED/DELETED reach the handler; BOOKMARK only moves the RV."""
    lw, handler = FakeListWatcher(), Recorder()
    lw.pages = [[{"items": []}]]
    lw.streams = [
        [
            {"type": "ADDED", "object": obj("a", "101")},
            {"type": "MODIFIED", "object": obj("a", "102")},
            {"type": "BOOKMARK", "object": obj("", "103")},
            {"type": "DELETED", "object": obj("a", "104")},
        ]
    ]
    r = reflector(lw, handler)
    r.list_and_replace()
    r.watch_once()
    assert handler.calls == [("add", "a"), ("update", "a"), ("delete", "a")]
    assert r.last_sync_resource_version == "104"
    assert lw.watched_from == ["100"]


def test_relist_after_a_gap_delivers_missed_deletes_and_changes() -> None:
    """Objects that vanished while unwatched are deleted; unchanged ones are not re-sent."""
    lw, handler = FakeListWatcher(), Recorder()
    lw.pages = [
        [{"items": [obj("same", "1"), obj("changed", "2"), obj("gone", "3")]}],
        [{"items": [obj("same", "1"), obj("changed", "5"), obj("new", "6")]}],
    ]
    r = reflector(lw, handler)
    r.list_and_replace()
    handler.calls.clear()
    r.list_and_replace()
    assert handler.calls == [("update", "changed"), ("add", "new"), ("delete-unknown", "gone")]


def test_run_relists_when_the_watch_expires() -> None:
    """A 410 from the watch leads to a fresh list, then a watch from the new RV."""
    lw, handler = FakeListWatcher(), Recorder()
    lw.pages = [[{"items": [obj("a", "1")]}], [{"items": []}]]
    lw.streams = [ExpiredError("too old")]
    Reflector(lw, Store(), handler, lw.exhausted, clock=lambda: 0.0).run()
    assert handler.calls == [("add", "a"), ("delete-unknown", "a")]
    assert lw.pages == []  # both lists were made


class RecordingStop(threading.Event):
    """A stop event whose waits return at once and are recorded."""

    def __init__(self) -> None:
        """Start unset with no waits."""
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        """Record the timeout instead of sleeping."""
        self.waits.append(timeout or 0.0)
        return self.is_set()


def test_run_backs_off_and_rewatches_without_relisting_on_other_errors() -> None:
    """A connection error is retried from the last RV after a backoff; no second list."""
    stop = RecordingStop()
    lw, handler = FakeListWatcher(stop), Recorder()
    lw.pages = [[{"items": []}]]
    lw.streams = [ConnectionRefusedError("down"), [{"type": "ADDED", "object": obj("a", "7")}]]
    Reflector(lw, Store(), handler, stop, clock=lambda: 0.0).run()
    assert handler.calls == [("add", "a")]
    assert lw.watched_from == ["100", "100", "7"]
    assert len(stop.waits) == 1
    assert 0.8 <= stop.waits[0] <= 1.6


def test_an_empty_watch_that_ends_at_once_is_an_error() -> None:
    """A watch closing immediately with no events raises instead of spinning."""
    lw, handler = FakeListWatcher(), Recorder()
    lw.pages = [[{"items": []}]]
    lw.streams = [[]]
    r = reflector(lw, handler)
    r.list_and_replace()
    with pytest.raises(VeryShortWatchError):
        r.watch_once()


@pytest.mark.parametrize(
    ("failures", "low", "high"),
    [
        pytest.param(0, 0.8, 1.6, id="first"),
        pytest.param(1, 1.6, 3.2, id="second"),
        pytest.param(5, 25.6, 30.0, id="sixth-capped"),
        pytest.param(10, 30.0, 30.0, id="far-capped"),
    ],
)
def test_backoff_doubles_with_jitter_up_to_the_cap(failures: int, low: float, high: float) -> None:
    """The n-th consecutive failure waits between base and 2·base, never above 30 s."""
    backoff = Backoff()
    for _ in range(failures):
        backoff.next_delay(0.0)
    assert low <= backoff.next_delay(0.0) <= high


def test_backoff_resets_after_two_quiet_minutes() -> None:
    """After 2 min without failures the delay starts from 0.8 s again."""
    backoff = Backoff()
    for _ in range(6):
        backoff.next_delay(0.0)
    assert backoff.next_delay(121.0) <= 1.6


def test_resync_replays_the_cache_without_api_calls() -> None:
    """With a resync period, cached objects come back as on_update(obj, obj)."""
    lw, handler = FakeListWatcher(), Recorder()
    informer = Informer([lw], handler, resync_period=0.01)
    informer.store.upsert(obj("a", "1"))
    seen = threading.Event()
    handler.on_update = lambda old, new: seen.set() if old is new else None  # type: ignore[method-assign]
    thread = threading.Thread(target=informer._resync_loop)  # noqa: SLF001 - resync only
    thread.start()
    try:
        assert seen.wait(5)
    finally:
        informer._stop.set()  # noqa: SLF001
        thread.join(5)
    assert lw.pages == []  # no list was made
    assert informer.store.keys() == [ObjectKey("ns", "a")]
