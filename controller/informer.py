"""The informer: list + watch one resource into a Store, and tell handlers what changed.

One ``Informer`` serves all namespaces, one namespace, or a list of namespaces; each scope
gets a reflector thread that follows client-go's reflector:

- **list** (paginated, a consistent read), replace the scope's part of the store and
  deliver the difference: adds, updates (only where the resourceVersion moved) and deletes
  for objects that vanished while we were not watching (``DeletedFinalStateUnknown``).
  Each page is frozen as it arrives and its decoded JSON let go before the next is asked
  for, so a relist holds one raw page, never the whole list: the interpreter keeps the
  memory a raw object held, and a whole list of them is more than twice what the cache
  then keeps;
- **watch** from the list's resourceVersion with bookmarks on and a random 5-10 min
  timeout; a timeout renews the watch from the last seen resourceVersion *without* a
  relist;
- **410 Gone / Expired** (our resourceVersion fell out of the server's history) → relist;
- **any other client failure** (connection refused, 5xx, 429, a dead socket, a line that
  does not decode: ``controller.failures.CLIENT_FAILURES``) → back off (0.8 s doubling to
  30 s, jittered, reset after 2 min of health), then watch again from the last
  resourceVersion (a watch from a known resourceVersion loses nothing), relisting only if
  that resourceVersion has expired meanwhile;
- **anything else** (a bug, a handler that raised) → the same backoff, then a relist: a
  reflector thread never dies of an exception. Failures are logged once per streak
  (``controller.failures.FailureStreak``).

With a label selector (``CustomObjectsListWatcher(label_selector=...)``) the server does
the filtering: an object whose labels stop matching is *deleted* from this informer's
point of view (``on_delete`` with its last matching state), one whose labels start
matching is *added*. The event alone cannot tell such a departure from a deletion (the
object comes in its last matching state either way); but an object with a finalizer is
marked (``metadata.deletionTimestamp``, an update) before it can go, so a controller that
finalizes has seen its deletion coming before the final delete event.

Resync replays the cache to ``on_update(obj, obj)`` every ``resync_period`` seconds from
memory, with no API call; a handler that raises cuts that replay short, never the thread.
Handlers run on the reflector and resync threads: they must be cheap (enqueue a key) and
must not block.

Every backoff, resync period and timeout is measured on the informer's ``Clock`` (a
``RealClock`` unless one is passed).
"""

from __future__ import annotations

import dataclasses
import random
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import structlog
from kubernetes import client, watch

from controller.cache import Object, ObjectKey, Store, freeze_object, resource_version
from controller.clock import Clock, RealClock
from controller.failures import CLIENT_FAILURES, FailureStreak
from controller.objectsapi import ObjectsApi
from controller.retry import REACHABILITY
from controller.threads import ThreadGroup

log = structlog.get_logger(__name__)

WatchEvent = Mapping[str, Any]
"""A raw watch event: ``{"type": ..., "object": {...}}``."""


_delivery = threading.local()


def received_at() -> float | None:
    """When the watch event being delivered was received (the informer's ``Clock.now``).

    For handlers, which run on the reflector's thread: the time the event came off the
    watch stream, so that a handler can tell how long the delivery took to reach it (the
    acknowledgment path's first leg). None on a thread that never received a watch event
    (a resync, a relist, a test calling a handler) or outside a watch event's delivery.
    """
    found: float | None = getattr(_delivery, "received_at", None)
    return found


class ExpiredError(Exception):
    """The resourceVersion we asked for is older than the server's history (410 Gone)."""


class VeryShortWatchError(Exception):
    """A watch closed at once with no events; something is wrong with the server or network."""


class ListWatcher(Protocol):
    """Lists and watches one resource in one scope (a namespace, or the whole cluster)."""

    namespace: str | None

    def list(self, limit: int, continue_token: str | None) -> Mapping[str, Any]:
        """One page of a consistent list: ``{"items": [...], "metadata": {...}}``.

        Raises:
            ExpiredError: the continue token expired.
        """

    def watch(self, resource_version: str, timeout_seconds: int) -> Iterator[WatchEvent]:
        """Stream events after ``resource_version`` until the server ends the watch.

        Raises:
            ExpiredError: ``resource_version`` is too old.
        """

    def stop(self) -> None:
        """Abort a running ``watch`` from another thread."""


@dataclasses.dataclass(frozen=True)
class DeletedFinalStateUnknown:
    """A delete the watch never delivered, found by a relist; ``obj`` is the last state seen."""

    key: ObjectKey
    obj: Object


class EventHandler(Protocol):
    """Receives changes; called on informer threads, so it must only enqueue work."""

    def on_add(self, obj: Object) -> None:
        """An object appeared (or was listed for the first time)."""

    def on_update(self, old: Object, new: Object) -> None:
        """An object changed; ``old is new`` (same resourceVersion) on a resync."""

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        """An object was deleted."""


class CustomObjectsListWatcher:
    """A ListWatcher for a custom resource through ``ObjectsApi``.

    With a ``label_selector`` the API server lists and watches only the objects whose
    labels match it; an object whose labels stop matching arrives as a DELETED event (its
    last matching state), one whose labels start matching as ADDED.
    """

    def __init__(  # noqa: PLR0913 - the resource's coordinates, its scope and its selector
        self,
        api_client: client.ApiClient,
        group: str,
        version: str,
        plural: str,
        namespace: str | None,
        label_selector: str = "",
    ) -> None:
        """Watch ``group/version/plural`` in ``namespace`` (None: all namespaces).

        ``label_selector`` (``kubectl -l`` syntax; "" for every object) is sent as is.
        """
        self._api = ObjectsApi(api_client)
        self._gvr = (group, version)
        self._plural = plural
        self.namespace = namespace
        self._selector = {"label_selector": label_selector} if label_selector else {}
        self._watch: watch.Watch | None = None

    def _call(self) -> tuple[Callable[..., Any], tuple[str, ...]]:
        group, version = self._gvr
        if self.namespace is None:
            return self._api.list_cluster_custom_object, (group, version, self._plural)
        args = (group, version, self.namespace, self._plural)
        return self._api.list_namespaced_custom_object, args

    def list(self, limit: int, continue_token: str | None) -> Mapping[str, Any]:
        """One page of a consistent (quorum) list."""
        func, args = self._call()
        try:
            page: Mapping[str, Any] = func(
                *args, limit=limit, _continue=continue_token, **self._selector
            )
        except client.ApiException as err:
            if err.status == 410:
                raise ExpiredError(str(err.reason)) from err
            raise
        return page

    def watch(self, resource_version: str, timeout_seconds: int) -> Iterator[WatchEvent]:
        """Watch with bookmarks from ``resource_version``; yields raw events."""
        func, args = self._call()
        stream = self._watch = watch.Watch()
        try:
            for event in stream.stream(
                func,
                *args,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_seconds,
                **self._selector,
                # The read timeout only trips on a dead connection: the server ends the
                # watch itself after timeout_seconds.
                _request_timeout=(10, timeout_seconds + 60),
            ):
                yield {"type": event["type"], "object": event["raw_object"]}
        except client.ApiException as err:
            if err.status == 410:
                raise ExpiredError(str(err.reason)) from err
            raise
        finally:
            self._watch = None

    def stop(self) -> None:
        """Close the running watch's connection, if any."""
        stream = self._watch
        if stream is not None:
            stream.stop()


# Objects per list page. client-go asks for 500; ours is smaller because a page's decoded
# JSON is more than twice its frozen copy and the interpreter keeps the memory it once
# held: after a list of 1,000 Stacks the operator's RSS is 64 MiB at 100, 68 MiB at 500.
PAGE_SIZE = 100


class Reflector:
    """Keeps one scope of a Store in sync with the server; see the module docstring."""

    def __init__(  # noqa: PLR0913 - each knob is documented and defaulted
        self,
        list_watcher: ListWatcher,
        store: Store,
        handler: EventHandler,
        stop: threading.Event,
        *,
        page_size: int = PAGE_SIZE,
        min_watch_timeout: int = 300,
        clock: Clock | None = None,
        on_synced: Callable[[], None] | None = None,
        resource: str = "objects",
    ) -> None:
        """Prepare a reflector; ``run`` does the work until ``stop`` is set.

        Backoffs are waited and watches timed on ``clock``; ``on_synced`` is called (on
        the reflector's thread) each time a list has been delivered. ``resource`` names
        what it reflects in its log lines (``loop="reflector of <resource> in <scope>"``).
        """
        self._lw = list_watcher
        self._store = store
        self._handler = handler
        self._stop = stop
        self._page_size = page_size
        self._min_watch_timeout = min_watch_timeout
        self._clock = clock or RealClock()
        self._on_synced = on_synced
        scope = list_watcher.namespace or "all namespaces"
        self._streak = FailureStreak(
            f"reflector of {resource} in {scope}",
            self._clock,
            expected=(*CLIENT_FAILURES, VeryShortWatchError),
        )
        self._synced = threading.Event()
        self.last_sync_resource_version = ""

    @property
    def namespace(self) -> str | None:
        """The scope this reflector fills (None: all namespaces)."""
        return self._lw.namespace

    def has_synced(self) -> bool:
        """True once the first list has been delivered."""
        return self._synced.is_set()

    def run(self) -> None:
        """List and watch until ``stop`` is set; never raises (see the module docstring)."""
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self.list_and_replace()
                    need_list = False
                    self._streak.succeeded()
                self.watch_once()
            except ExpiredError as err:
                log.info("Watch expired; relisting", error=str(err), namespace=self.namespace)
                need_list = True
            except Exception as err:  # noqa: BLE001 - a reflector outlives any failed pass
                if self._stop.is_set():  # shut_down() closed the connection under us
                    return
                REACHABILITY.observe(err)  # a restarting apiserver's 403s are transient
                if not isinstance(err, (*CLIENT_FAILURES, VeryShortWatchError)):
                    need_list = True  # a bug met mid-delivery: start again from a list
                now = self._clock.now()
                delay = self._streak.failed(err, namespace=self.namespace)
                self._clock.wait_event(self._stop, now + delay)

    def shut_down(self) -> None:
        """Abort a running watch; ``run`` returns once ``stop`` is set."""
        self._lw.stop()

    def list_and_replace(self) -> None:
        """List every page, replace this scope in the store, deliver the difference."""
        items: list[Object] = []
        continue_token: str | None = None
        while True:
            frozen, continue_token, listed_at = self._list_page(continue_token)
            items.extend(frozen)
            if continue_token is None:
                break
        upserts, deleted = self._store.replace(items, self._lw.namespace)
        for old, new in upserts:
            if old is None:
                self._handler.on_add(new)
            elif resource_version(old) != resource_version(new):
                self._handler.on_update(old, new)
        for obj in deleted:
            self._handler.on_delete(DeletedFinalStateUnknown(ObjectKey.of(obj), obj))
        self.last_sync_resource_version = listed_at
        self._synced.set()
        if self._on_synced is not None:
            self._on_synced()

    def _list_page(self, continue_token: str | None) -> tuple[list[Object], str | None, str]:
        """One page, frozen: (objects, the next page's token or None, its resourceVersion).

        The page's decoded JSON is dropped on return (module docstring).
        """
        page = self._lw.list(self._page_size, continue_token)
        meta = page["metadata"]
        frozen = [freeze_object(obj) for obj in page.get("items") or ()]
        return frozen, meta.get("continue") or None, str(meta.get("resourceVersion", ""))

    def watch_once(self) -> None:
        """Watch from the last resourceVersion until the server ends the stream.

        Raises:
            VeryShortWatchError: the watch ended within a second having delivered nothing,
                which client-go also treats as a failure (to back off, not spin).
        """
        timeout = random.randint(self._min_watch_timeout, 2 * self._min_watch_timeout)  # noqa: S311
        started, delivered = self._clock.now(), 0
        for event in self._lw.watch(self.last_sync_resource_version, timeout):
            if self._stop.is_set():
                return
            self._apply(event)
            if not delivered:
                self._streak.succeeded()  # the watch answers again
            delivered += 1
        if delivered == 0 and self._clock.now() - started < 1.0 and not self._stop.is_set():
            raise VeryShortWatchError(self.last_sync_resource_version)

    def _apply(self, event: WatchEvent) -> None:
        kind, obj = event["type"], event["object"]
        self.last_sync_resource_version = resource_version(obj)
        if kind == "BOOKMARK":
            return
        _delivery.received_at = self._clock.now()
        try:
            self._deliver(kind, obj)
        finally:
            _delivery.received_at = None  # a relist's handler calls must not read this time

    def _deliver(self, kind: str, obj: Mapping[str, Any]) -> None:
        if kind == "DELETED":
            self._store.delete(ObjectKey.of(obj))
            self._handler.on_delete(freeze_object(obj))  # the final state, as the server sent it
            return
        previous, stored = self._store.upsert(obj)
        if previous is None:
            self._handler.on_add(stored)
        else:
            self._handler.on_update(previous, stored)


class Informer:
    """Reflectors for each namespace in scope, one store, one resync timer."""

    def __init__(  # noqa: PLR0913 - each knob is documented and defaulted
        self,
        list_watchers: Sequence[ListWatcher],
        handler: EventHandler,
        *,
        store: Store | None = None,
        resync_period: float = 0.0,
        min_watch_timeout: int = 300,
        clock: Clock | None = None,
        resource: str = "objects",
    ) -> None:
        """Prepare an informer filling ``store`` (a new one by default); resync 0 is off.

        Backoffs, the resync period and the timeouts of ``wait_for_cache_sync`` and
        ``stop`` are measured on ``clock``. ``resource`` names what it informs of in its
        log lines.
        """
        self.store = store if store is not None else Store()
        self._clock = clock or RealClock()
        self._stop = threading.Event()
        # Notified when a reflector has synced and when the informer stops.
        self._changed = threading.Condition()
        self._handler = handler
        self._resync_period = resync_period
        self._resource = resource
        self._reflectors = [
            Reflector(
                lw,
                self.store,
                handler,
                self._stop,
                min_watch_timeout=min_watch_timeout,
                clock=self._clock,
                on_synced=self._notify,
                resource=resource,
            )
            for lw in list_watchers
        ]
        self._threads = ThreadGroup(self._clock)

    def run(self) -> None:
        """Start the reflector threads (and the resync thread); returns at once."""
        for reflector in self._reflectors:
            scope = reflector.namespace or "all-namespaces"
            self._threads.start(reflector.run, f"reflector-{scope}")
        if self._resync_period > 0:
            self._threads.start(self._resync_loop, "resync")

    def has_synced(self) -> bool:
        """True once every reflector has delivered its first list."""
        return all(r.has_synced() for r in self._reflectors)

    def wait_for_cache_sync(self, timeout: float) -> bool:
        """Block until ``has_synced``, ``stop`` or ``timeout`` seconds; returns ``has_synced()``."""
        deadline = self._clock.now() + timeout
        with self._changed:
            while (
                not self.has_synced() and not self._stop.is_set() and self._clock.now() < deadline
            ):
                self._clock.wait_until(self._changed, deadline)
        return self.has_synced()

    def alive(self) -> bool:
        """True while every informer thread is running (for /healthz)."""
        return self._threads.started() > 0 and self._threads.alive()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every thread and wait up to ``timeout`` seconds for them."""
        self._stop.set()
        self._notify()
        for reflector in self._reflectors:
            reflector.shut_down()
        self._threads.join_until(self._clock.now() + timeout)

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def _resync_loop(self) -> None:
        """Replay the cache every period; a handler that raises is logged, the next one waits."""
        streak = FailureStreak(f"resync of {self._resource}", self._clock)
        while not self._clock.wait_event(self._stop, self._clock.now() + self._resync_period):
            try:
                for obj in self.store.objects():
                    self._handler.on_update(obj, obj)
            except Exception as err:  # noqa: BLE001 - the resync outlives a handler's bug
                streak.failed(err)
            else:
                streak.succeeded()
