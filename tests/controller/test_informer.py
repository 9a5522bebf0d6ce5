"""The reflector lists, watches, relists on 410 and delivers the difference (fake API).

Backoffs, the resync period and the informer's timeouts run on a FakeClock: each test
steps it, and would hang (then fail) if the informer waited in real time instead.
"""

from __future__ import annotations

import threading
import types
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from kubernetes import client

from controller.cache import Object, ObjectKey, Store
from controller.clock import FakeClock
from controller.informer import (
    PAGE_SIZE,
    CustomObjectsListWatcher,
    DeletedFinalStateUnknown,
    ExpiredError,
    Informer,
    Reflector,
    VeryShortWatchError,
    WatchEvent,
    received_at,
)

# Real seconds a background thread may take to react; only ever reached by a failing test.
JOIN_TIMEOUT = 5.0


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
        self.streams: list[list[WatchEvent] | Exception | Callable[[], Iterator[WatchEvent]]] = []
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
        yield from script() if callable(script) else script

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


def reflector(lw: FakeListWatcher, handler: Recorder, clock: FakeClock | None = None) -> Reflector:
    """A reflector over a fresh store, on a fake clock."""
    return Reflector(lw, Store(), handler, threading.Event(), clock=clock or FakeClock())


def test_list_pages_are_joined_and_delivered_as_adds() -> None:
    """Every item of every page arrives once, and the watch starts at the list's RV."""
    lw, handler = FakeListWatcher(), Recorder()
    lw.pages = [[{"items": [obj("a", "1")]}, {"items": [obj("b", "2")]}]]
    r = reflector(lw, handler)
    r.list_and_replace()
    assert handler.calls == [("add", "a"), ("add", "b")]
    assert r.last_sync_resource_version == "100"
    assert r.has_synced()


class Raw(dict[str, Any]):
    """A decoded object that can be watched for its release (a plain dict cannot)."""


class PagedListWatcher(FakeListWatcher):
    """Decodes each page afresh and notes which earlier pages' objects are still alive."""

    def __init__(self, pages: int, per_page: int) -> None:
        """Serve ``pages`` pages of ``per_page`` objects each."""
        super().__init__()
        self.total, self.per_page = pages, per_page
        self.limits: list[int] = []
        self.alive_at_each_list: list[int] = []
        self.raw: list[weakref.ref[Raw]] = []

    def list(self, limit: int, continue_token: str | None) -> Mapping[str, Any]:
        """The next page, as freshly decoded JSON."""
        self.limits.append(limit)
        self.alive_at_each_list.append(sum(ref() is not None for ref in self.raw))
        index = int(continue_token or 0)
        items = [Raw(obj(f"p{index}-{i}", str(index))) for i in range(self.per_page)]
        self.raw.extend(weakref.ref(item) for item in items)
        meta: dict[str, Any] = {"resourceVersion": "100"}
        if index + 1 < self.total:
            meta["continue"] = str(index + 1)
        return {"items": items, "metadata": meta}


def test_a_list_lets_each_page_go_before_asking_for_the_next() -> None:
    """A relist holds one decoded page at a time, never the whole list (memory).

    Every object arrives frozen in the store; no decoded object of an earlier page is
    alive when the next page is asked for, nor once the list is delivered.
    """
    lw, handler = PagedListWatcher(pages=3, per_page=4), Recorder()
    store = Store()
    r = Reflector(lw, store, handler, threading.Event(), clock=FakeClock())
    r.list_and_replace()
    assert lw.alive_at_each_list == [0, 0, 0]
    assert lw.limits == [PAGE_SIZE] * 3
    assert len(store) == 12
    assert not any(isinstance(o, Raw) for o in store.objects())
    assert all(isinstance(o, types.MappingProxyType) for o in store.objects())
    assert sum(ref() is not None for ref in lw.raw) == 0
    assert r.last_sync_resource_version == "100"


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
    Reflector(lw, Store(), handler, lw.exhausted, clock=FakeClock()).run()
    assert handler.calls == [("add", "a"), ("delete-unknown", "a")]
    assert lw.pages == []  # both lists were made


def start(target: Callable[[], object]) -> threading.Thread:
    """Run ``target`` in a daemon thread."""
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def test_run_backs_off_and_rewatches_without_relisting_on_other_errors() -> None:
    """A connection error is retried from the last RV after a 0.8-1.6 s backoff; no relist."""
    clock, stop = FakeClock(), threading.Event()
    lw, handler = FakeListWatcher(stop), Recorder()
    lw.pages = [[{"items": []}]]
    lw.streams = [ConnectionRefusedError("down"), [{"type": "ADDED", "object": obj("a", "7")}]]
    runner = start(Reflector(lw, Store(), handler, stop, clock=clock).run)
    assert clock.wait_for_waiters(1), "the reflector should back off on the clock"
    clock.step(0.79)
    assert clock.wait_for_waiters(1), "0.79 s is shorter than any backoff"
    assert lw.watched_from == ["100"]
    clock.step(1.6 - 0.79)
    runner.join(JOIN_TIMEOUT)
    assert not runner.is_alive()
    assert handler.calls == [("add", "a")]
    assert lw.watched_from == ["100", "100", "7"]


def test_a_set_stop_ends_the_backoff_at_once() -> None:
    """Stopping during a backoff returns without waiting for the clock."""
    clock, stop = FakeClock(), threading.Event()
    lw = FakeListWatcher(stop)
    lw.pages = [[{"items": []}]]
    lw.streams = [ConnectionRefusedError("down")]
    runner = start(Reflector(lw, Store(), Recorder(), stop, clock=clock).run)
    assert clock.wait_for_waiters(1)
    stop.set()
    runner.join(JOIN_TIMEOUT)
    assert not runner.is_alive()
    assert lw.watched_from == ["100"]


def test_an_empty_watch_that_ends_at_once_is_an_error() -> None:
    """A watch closing immediately with no events raises instead of spinning."""
    lw, handler = FakeListWatcher(), Recorder()
    lw.pages = [[{"items": []}]]
    lw.streams = [[]]
    r = reflector(lw, handler)
    r.list_and_replace()
    with pytest.raises(VeryShortWatchError):
        r.watch_once()


def test_an_empty_watch_that_lasted_a_second_of_the_clock_is_not_an_error() -> None:
    """The watch's length is read on the reflector's clock, not in real time."""
    clock = FakeClock()
    lw, handler = FakeListWatcher(), Recorder()
    lw.pages = [[{"items": []}]]

    def quiet_second() -> Iterator[WatchEvent]:
        clock.step(1.0)
        yield from ()

    lw.streams = [quiet_second]
    r = reflector(lw, handler, clock)
    r.list_and_replace()
    r.watch_once()
    assert handler.calls == []


def test_resync_replays_the_cache_every_period_of_the_clock_without_api_calls() -> None:
    """With a resync period, cached objects come back as on_update(obj, obj), per period."""
    clock = FakeClock()
    lw, handler = FakeListWatcher(), Recorder()
    informer = Informer([lw], handler, resync_period=30.0, clock=clock)
    informer.store.upsert(obj("a", "1"))
    thread = start(informer._resync_loop)  # noqa: SLF001 - resync only
    try:
        assert clock.wait_for_waiters(1)
        clock.step(29.0)
        assert clock.wait_for_waiters(1)
        assert handler.calls == []
        clock.step(1.0)
        assert clock.wait_for_waiters(1)
        assert handler.calls == [("resync", "a")]
    finally:
        informer.stop()
        thread.join(JOIN_TIMEOUT)
    assert not thread.is_alive()
    assert lw.pages == []  # no list was made
    assert informer.store.keys() == [ObjectKey("ns", "a")]


def test_a_handler_that_raises_in_a_resync_does_not_end_the_resync() -> None:
    """The replay stops short and is logged; the next period replays again."""
    clock = FakeClock()
    calls: list[str] = []

    class Failing(Recorder):
        def on_update(self, old: Object, new: Object) -> None:
            del old
            calls.append(new["metadata"]["name"])
            if len(calls) == 1:
                raise RuntimeError("a bug in a handler")

    informer = Informer([FakeListWatcher()], Failing(), resync_period=30.0, clock=clock)
    informer.store.upsert(obj("a", "1"))
    thread = start(informer._resync_loop)  # noqa: SLF001 - the resync thread alone
    try:
        for _ in range(2):
            assert clock.wait_for_waiters(1)
            clock.step(30.0)
        assert clock.wait_for_waiters(1)
        assert calls == ["a", "a"]
        assert thread.is_alive()
    finally:
        informer.stop()
        thread.join(JOIN_TIMEOUT)


def test_a_bug_met_while_listing_is_survived_with_a_relist() -> None:
    """Not a client failure: the reflector backs off, then lists afresh (not only watches)."""
    clock, stop = FakeClock(), threading.Event()
    lw, handler = FakeListWatcher(stop), Recorder()
    lw.pages = [[{"items": []}], [{"items": [obj("a", "7")]}]]
    lw.streams = [RuntimeError("a bug"), []]
    runner = start(Reflector(lw, Store(), handler, stop, clock=clock).run)
    assert clock.wait_for_waiters(1), "the reflector should back off on the clock"
    clock.step(1.6)
    assert clock.wait_for_waiters(1), "the second, empty, watch is an error too"
    assert handler.calls == [("add", "a")]
    assert lw.pages == []  # both lists were made
    stop.set()
    runner.join(JOIN_TIMEOUT)
    assert not runner.is_alive()


class BlockingListWatcher(FakeListWatcher):
    """Lists nothing until ``release`` is set; its watch then ends at once, every time."""

    def __init__(self) -> None:
        """Nothing released."""
        super().__init__()
        self.release = threading.Event()

    def list(self, limit: int, continue_token: str | None) -> Mapping[str, Any]:
        """Block until released, then one empty page."""
        del limit, continue_token
        assert self.release.wait(JOIN_TIMEOUT)
        return {"items": [], "metadata": {"resourceVersion": "100"}}

    def watch(self, resource_version: str, timeout_seconds: int) -> Iterator[WatchEvent]:
        """Block until released; then nothing."""
        del resource_version, timeout_seconds
        self.release.wait()
        yield from ()


def test_wait_for_cache_sync_times_out_on_the_clock() -> None:
    """An unsynced informer gives up when the clock, not the wall, reaches the timeout."""
    clock, lw = FakeClock(), BlockingListWatcher()
    informer = Informer([lw], Recorder(), clock=clock)
    answers: list[bool] = []
    waiter = start(lambda: answers.append(informer.wait_for_cache_sync(300.0)))
    try:
        assert clock.wait_for_waiters(1)
        clock.step(299.0)
        assert clock.wait_for_waiters(1)
        assert answers == []
        clock.step(1.0)
        waiter.join(JOIN_TIMEOUT)
        assert answers == [False]
    finally:
        lw.release.set()


def test_wait_for_cache_sync_returns_when_the_list_arrives() -> None:
    """A sync wakes the waiter at once; the fake time never moves."""
    clock, lw = FakeClock(), BlockingListWatcher()
    informer = Informer([lw], Recorder(), clock=clock)
    answers: list[bool] = []
    waiter = start(lambda: answers.append(informer.wait_for_cache_sync(300.0)))
    informer.run()
    try:
        assert clock.wait_for_waiters(1)
        lw.release.set()
        waiter.join(JOIN_TIMEOUT)
        assert answers == [True]
        assert clock.now() == 0.0
    finally:
        lw.release.set()
        informer.stop()  # the reflector's backoff ends as soon as the stop is set
    assert not informer.alive()


def test_stop_waits_for_its_threads_until_the_clock_reaches_the_timeout() -> None:
    """A reflector stuck in a watch holds ``stop`` only for ``timeout`` seconds of the clock."""
    clock, lw = FakeClock(), BlockingListWatcher()
    informer = Informer([lw], Recorder(), clock=clock)
    informer.run()
    stopper = start(lambda: informer.stop(timeout=10.0))
    try:
        assert clock.wait_for_waiters(1)
        assert informer.alive()
        clock.step(10.0)
        stopper.join(JOIN_TIMEOUT)
        assert not stopper.is_alive()
        assert informer.alive(), "the stuck reflector is given up on, not killed"
    finally:
        lw.release.set()


class RecordingCustomObjects:
    """Stands in for ``CustomObjectsApi``: records each list call's arguments."""

    def __init__(self) -> None:
        """No call yet."""
        self.calls: list[tuple[tuple[object, ...], dict[str, object]]] = []

    def list_namespaced_custom_object(self, *args: object, **kwargs: object) -> Mapping[str, Any]:
        """Record; an empty page."""
        self.calls.append((args, kwargs))
        return {"items": [], "metadata": {"resourceVersion": "1"}}

    list_cluster_custom_object = list_namespaced_custom_object


@pytest.mark.parametrize("namespace", ["ns", None])
def test_the_label_selector_goes_with_every_list(namespace: str | None) -> None:
    """``label_selector`` is sent as the list's ``labelSelector``; "" sends none."""
    for selector, sent in (("shard=a", {"label_selector": "shard=a"}), ("", {})):
        lw = CustomObjectsListWatcher(
            client.ApiClient(), "g", "v1", "things", namespace, label_selector=selector
        )
        api = RecordingCustomObjects()
        lw._api = api  # type: ignore[assignment]  # noqa: SLF001 - the seam for this test
        lw.list(10, None)
        [(_, kwargs)] = api.calls
        assert kwargs == {"limit": 10, "_continue": None, **sent}


class ReceiptRecorder(Recorder):
    """Also records ``received_at()`` as each handler call sees it."""

    def __init__(self) -> None:
        """Start empty."""
        super().__init__()
        self.received: list[float | None] = []

    def on_add(self, obj: Object) -> None:
        """Record the add and when its event was received."""
        self.received.append(received_at())
        super().on_add(obj)


def test_handlers_can_tell_when_the_watch_event_was_received() -> None:
    """``received_at`` is the informer clock's time of the event being delivered."""
    clock = FakeClock(50.0)
    lw, handler = FakeListWatcher(), ReceiptRecorder()
    lw.pages = [[{"items": []}]]

    def stream() -> Iterator[WatchEvent]:
        yield {"type": "ADDED", "object": obj("a", "101")}
        clock.step(2)
        yield {"type": "ADDED", "object": obj("b", "102")}

    lw.streams = [stream]
    r = reflector(lw, handler, clock)
    r.list_and_replace()
    r.watch_once()
    assert handler.received == [50.0, 52.0]


def test_a_relist_after_a_watch_event_does_not_carry_that_events_time() -> None:
    """A handler called by a relist reads None, not the last watch event's receipt."""
    clock = FakeClock(50.0)
    lw, handler = FakeListWatcher(), ReceiptRecorder()
    lw.pages = [[{"items": []}], [{"items": [obj("a", "101"), obj("b", "105")]}]]

    def stream() -> Iterator[WatchEvent]:
        yield {"type": "ADDED", "object": obj("a", "101")}

    lw.streams = [stream]
    r = reflector(lw, handler, clock)
    r.list_and_replace()
    r.watch_once()
    clock.step(30)
    r.list_and_replace()  # as after a 410: b arrives through the relist
    assert handler.received == [50.0, None]
