"""Informers of the objects a Stack's program can come from: Programs and Flux sources.

Role: ``SourceWatch`` keeps an informer per source kind the cluster serves (``Program`` of
``pulumi.com/v1``; ``GitRepository``, ``OCIRepository`` and ``Bucket`` of
``source.toolkit.fluxcd.io``, ``v1`` where served, else ``v1beta2``), answers the reconciler
from their caches (``reconcile.sources.SourceObjects``), and enqueues the Stacks that
reference an object whenever it changes (a new artifact revision, an edited Program).

Guarantees:

- A kind the cluster does not serve (Flux not installed, or installed later) never stops
  the operator nor floods its log: whether it is served is asked again every discovery
  period (``DISCOVERY_PERIOD`` seconds unless given), and its informer starts once it is.
  Until then ``served(kind)`` is False and Stacks naming it wait (``SourceNotReady``).
- Discovery outlives any failure of a look (the API server away, an answer that does not
  decode, a bug): it is logged once per streak (``controller.failures.FailureStreak``) and
  the next look comes a period later, or later still while the streak's backoff is longer;
  so ``alive()`` stays true through an API outage.
- Only the Stacks in the object's namespace that name it are enqueued (by kind and name);
  the informers watch the operator's own scope (one namespace, or all).
- Event handlers only enqueue; no API call happens on an informer thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import structlog
from kubernetes import client

from controller.cache import Object, ObjectKey, Store
from controller.clock import Clock
from controller.failures import FailureStreak
from controller.informer import CustomObjectsListWatcher, DeletedFinalStateUnknown, Informer
from controller.objectsapi import ObjectsApi
from controller.threads import ThreadGroup
from reconcile.sources import FLUX_GROUP, PROGRAM_KIND

log = structlog.get_logger(__name__)

DISCOVERY_PERIOD: Final = 30.0
"""Seconds between two looks for source kinds the cluster did not serve yet."""


@dataclass(frozen=True, slots=True)
class SourceKind:
    """A kind a Stack's program can come from, and where the API serves it."""

    kind: str
    group: str
    versions: tuple[str, ...]
    """The versions to watch, preferred first (the first one served is used)."""
    plural: str


KINDS: Final = (
    SourceKind(PROGRAM_KIND, "pulumi.com", ("v1",), "programs"),
    SourceKind("GitRepository", FLUX_GROUP, ("v1", "v1beta2"), "gitrepositories"),
    SourceKind("OCIRepository", FLUX_GROUP, ("v1", "v1beta2"), "ocirepositories"),
    SourceKind("Bucket", FLUX_GROUP, ("v1", "v1beta2"), "buckets"),
)
"""Every source kind, with its group, versions and resource name."""


def references(stack: Mapping[str, Any], kind: str, name: str) -> bool:
    """Whether ``stack``'s spec names the object ``kind``/``name`` as its program source."""
    spec = stack.get("spec") or {}
    if kind == PROGRAM_KIND:
        return bool((spec.get("programRef") or {}).get("name") == name)
    ref = (spec.get("fluxSource") or {}).get("sourceRef") or {}
    return bool(ref.get("kind") == kind and ref.get("name") == name)


class Referrers:
    """An informer handler: a change to a source object enqueues the Stacks naming it."""

    def __init__(self, kind: str, stacks: Store, enqueue: Callable[[ObjectKey], None]) -> None:
        """Map objects of ``kind`` to the Stacks in ``stacks``; hand their keys to ``enqueue``."""
        self._kind, self._stacks, self._enqueue = kind, stacks, enqueue

    def on_add(self, obj: Object) -> None:
        """A new object: its Stacks may run now."""
        self._changed(ObjectKey.of(obj))

    def on_update(self, old: Object, new: Object) -> None:
        """A changed object (or a resync): its Stacks look again."""
        del old
        self._changed(ObjectKey.of(new))

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        """A deleted object: its Stacks wait for it."""
        self._changed(obj.key if isinstance(obj, DeletedFinalStateUnknown) else ObjectKey.of(obj))

    def _changed(self, key: ObjectKey) -> None:
        for stack in self._stacks.objects(key.namespace):
            if references(stack, self._kind, key.name):
                self._enqueue(ObjectKey.of(stack))


class SourceWatch:
    """Informers of the source kinds (see the module docstring); a ``SourceObjects``."""

    def __init__(  # noqa: PLR0913 - the API, the scope, the Stacks, the queue and the clock
        self,
        api_client: client.ApiClient,
        namespaces: Sequence[str | None],
        stacks: Store,
        enqueue: Callable[[ObjectKey], None],
        clock: Clock,
        kinds: Sequence[SourceKind] = KINDS,
        *,
        period: float = DISCOVERY_PERIOD,
    ) -> None:
        """Watch ``kinds`` in ``namespaces`` (``[None]``: all) for the Stacks in ``stacks``.

        Kinds not served yet are looked for again every ``period`` seconds of ``clock``.
        """
        self._api = api_client
        self._period = period
        self._streak = FailureStreak("source discovery", clock)
        self._namespaces = list(namespaces)
        self._stacks, self._enqueue, self._clock = stacks, enqueue, clock
        self._kinds = {kind.kind: kind for kind in kinds}
        self._informers: dict[str, Informer] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._discovered = threading.Event()  # every kind's informer started
        self._threads = ThreadGroup(clock)

    # -- SourceObjects -------------------------------------------------------------------

    def served(self, kind: str) -> bool:
        """Whether ``kind`` is served and its informer has listed it once."""
        with self._lock:
            informer = self._informers.get(kind)
        return informer is not None and informer.has_synced()

    def get(self, kind: str, key: ObjectKey) -> Mapping[str, Any] | None:
        """The cached object, or None (also while ``kind`` is not served)."""
        with self._lock:
            informer = self._informers.get(kind)
        return None if informer is None else informer.store.get(key)

    # -- lifecycle -----------------------------------------------------------------------

    def run(self) -> None:
        """Start looking for the kinds (and watching those served); returns at once."""
        self._threads.start(self._discover, "source-discovery")

    def alive(self) -> bool:
        """True while discovery runs (or has found every kind) and every informer runs."""
        with self._lock:
            informers = list(self._informers.values())
        discovering = self._threads.alive() or self._discovered.is_set()
        return discovering and all(informer.alive() for informer in informers)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop discovery and every informer, waiting up to ``timeout`` seconds."""
        self._stop.set()
        with self._lock:
            informers = list(self._informers.values())
        deadline = self._clock.now() + timeout
        for informer in informers:
            informer.stop(max(0.0, deadline - self._clock.now()))
        self._threads.join_until(deadline)

    def _discover(self) -> None:
        """Start an informer for each kind once it is served; look again until all are."""
        while not self._stop.is_set():
            backoff = self._look()
            if len(self._informers) == len(self._kinds):
                self._discovered.set()
                return
            wait = max(self._period, backoff)
            self._clock.wait_event(self._stop, self._clock.now() + wait)

    def _look(self) -> float:
        """One look at every kind not watched yet; the streak's backoff if one failed, else 0."""
        backoff = 0.0
        for kind in self._kinds.values():
            if kind.kind in self._informers:
                continue
            try:
                self._start_if_served(kind)
            except Exception as err:  # noqa: BLE001 - discovery outlives any failed look
                backoff = self._streak.failed(err, kind=kind.kind)
        if not backoff:
            self._streak.succeeded()
        return backoff

    def _start_if_served(self, kind: SourceKind) -> None:
        version = self._served_version(kind)
        if version is None:
            return
        watchers = [
            CustomObjectsListWatcher(self._api, kind.group, version, kind.plural, namespace)
            for namespace in self._namespaces
        ]
        handler = Referrers(kind.kind, self._stacks, self._enqueue)
        informer = Informer(watchers, handler, clock=self._clock, resource=kind.plural)
        informer.run()  # before it is seen: alive() never finds it not started yet
        with self._lock:
            self._informers[kind.kind] = informer
        log.info("Watching a program source kind", kind=kind.kind, version=version)

    def _served_version(self, kind: SourceKind) -> str | None:
        """The first of ``kind.versions`` whose API lists ``kind.plural``; None: none does.

        Raises:
            Exception: anything but a 404 (a group or version not served), as the call did.
        """
        for version in kind.versions:
            try:
                found = ObjectsApi(self._api).get_api_resources(kind.group, version)
            except client.ApiException as err:
                if err.status == 404:
                    continue
                raise
            served = (resource.get("name") for resource in found.get("resources") or ())
            if kind.plural in served:
                return version
        return None
