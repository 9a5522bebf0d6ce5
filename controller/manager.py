"""The manager: wires informer, controller, leader election, probes and metrics; runs them.

Life of a process:

1. Load the Kubernetes client configuration, start ``/metrics`` (with
   ``--metrics-secure``: HTTPS, for callers the API server authenticates and authorizes)
   and the probes (``/healthz``: every thread alive; ``/readyz``: caches synced).
2. Start the informer on every replica, so a standby's cache is warm when it takes over.
   With a label selector (``Config.label_selector``) it lists and watches only the
   matching objects; one whose labels stop matching is let go, not deleted: its written
   copy is forgotten (the view), its reconcile in flight is stopped as a shutdown stops it
   (``Controller.release``), and the reconciler, finding it gone, forgets it (a reconciler
   that finalizes starts from ``deletionTimestamp``, an update, never from a delete).
3. Once the cache is synced (and, with ``--leader-elect``, the Lease is ours) start the
   reconcile workers.
4. On SIGTERM/SIGINT: stop taking work, let running reconciles finish for
   ``--shutdown-timeout`` seconds, then interrupt them; release the Lease only after the
   workers are done (so a standby never runs an update next to ours); exit 0.
5. If the Lease is lost, stop reconciling at once (interrupt) and exit 1, as client-go
   controllers do; the Deployment restarts the pod as a standby.

One ``Clock`` (``Manager(clock=...)``, a ``RealClock`` by default) times every part the
manager builds: informer, work queue and workers, leader election, the metrics server's
review cache and certificate; reconcilers find it as ``ManagerContext.clock``.
"""

from __future__ import annotations

import dataclasses
import http.server
import signal
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import structlog
from kubernetes import client
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from controller import heap
from controller.cache import Object, ObjectKey, Store
from controller.clock import Clock, RealClock
from controller.config import Config
from controller.informer import (
    CustomObjectsListWatcher,
    DeletedFinalStateUnknown,
    EventHandler,
    Informer,
)
from controller.kubeconfig import load_api_client
from controller.leaderelection import LeaderElectionConfig, LeaderElector
from controller.metrics_server import Certificates, Reviewer, SecureMetricsServer
from controller.reconciler import Reconciler
from controller.signals import relay_signals
from controller.threads import ThreadGroup
from controller.view import ReadYourWritesView
from controller.workers import Controller, by_namespace

log = structlog.get_logger(__name__)

CACHE_SYNC_TIMEOUT = 300.0
CLOSE_TIMEOUT = 5.0  # seconds each closer may take at shutdown (flushing Events)
RELEASE_TIMEOUT = 10.0  # seconds the elector may take to release the Lease at shutdown


@dataclasses.dataclass(frozen=True)
class Resource:
    """The custom resource a controller reconciles."""

    group: str
    version: str
    plural: str


@dataclasses.dataclass(frozen=True)
class ManagerContext:
    """What a reconciler may use: the API client, the informer's cache, the settings."""

    api_client: client.ApiClient
    store: Store
    config: Config
    registry: CollectorRegistry
    stop: threading.Event
    view: ReadYourWritesView
    """The cache with this process's writes on top: record each object a write returns
    with ``view.observe`` and read with ``view.get``, so a decision never rests on a copy
    older than our own last write. One per manager, shared by everything it builds."""
    handlers: list[EventHandler] = dataclasses.field(default_factory=list)
    """Extra informer event handlers (e.g. metrics); the factory may append to it."""
    closers: list[Callable[[float], object]] = dataclasses.field(default_factory=list)
    """Called with a timeout in seconds once the workers have drained (flush, stop threads)."""
    liveness_checks: list[Callable[[], bool]] = dataclasses.field(default_factory=list)
    """Each says whether a long-lived thread of the reconciler still runs; ``/healthz``
    fails while any says False (or raises)."""
    leading_since: Callable[[], float | None] = lambda: None
    """``clock.now()`` when this replica took the Lease; None when not leading."""
    clock: Clock = dataclasses.field(default_factory=RealClock)
    """The manager's clock: what ``leading_since`` is measured on. Share it rather than
    making another, so that every part of the process reads the same time."""
    enqueue: Callable[[ObjectKey], None] = lambda _key: None
    """Puts a key in the controller's queue: for informers of other kinds (an object a
    Stack refers to changed). Call it from event handlers only, once ``starters`` ran."""
    starters: list[Callable[[], None]] = dataclasses.field(default_factory=list)
    """Called once the informer runs, before its cache syncs: start the reconciler's own
    informers and threads here (stop them with a closer)."""


ReconcilerFactory = Callable[[ManagerContext], Reconciler]


def instrument(api_client: client.ApiClient, registry: CollectorRegistry) -> None:
    """Count every API request by method and status: client-go's rest_client_requests_total."""
    requests = Counter(
        "rest_client_requests_total",
        "Number of HTTP requests, partitioned by status code, method, and host.",
        ["code", "method", "host"],
        registry=registry,
    )
    rest = api_client.rest_client
    original: Callable[..., object] = rest.request
    host = api_client.configuration.host

    def request(method: str, url: str, *args: object, **kwargs: object) -> object:
        try:
            response = original(method, url, *args, **kwargs)
        except Exception:
            requests.labels("<error>", method, host).inc()
            raise
        requests.labels(str(getattr(response, "status", "<error>")), method, host).inc()
        return response

    rest.request = request  # type: ignore[method-assign]


class FanOut:
    """Delivers each informer event to several handlers, in order."""

    def __init__(self, handlers: Sequence[EventHandler]) -> None:
        """Fan out to ``handlers``."""
        self._handlers = list(handlers)

    def on_add(self, obj: Object) -> None:
        """Forward an add."""
        for handler in self._handlers:
            handler.on_add(obj)

    def on_update(self, old: Object, new: Object) -> None:
        """Forward an update."""
        for handler in self._handlers:
            handler.on_update(old, new)

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        """Forward a delete."""
        for handler in self._handlers:
            handler.on_delete(obj)


class Departures:
    """With a label selector, stops the reconcile of an object the informer lets go.

    The informer cannot tell an object that left the selection from a deleted one; either
    way it is no longer this process's: a reconcile running for it is stopped as a shutdown
    stops it (``Controller.release``). A deletion that needs finalizing was seen before
    (``deletionTimestamp``) and finalized; its final delete has nothing left to stop.
    """

    def __init__(self, controller: Controller) -> None:
        """Release keys of ``controller``."""
        self._controller = controller

    def on_add(self, obj: Object) -> None:
        """Nothing: a new object is reconciled as usual."""

    def on_update(self, old: Object, new: Object) -> None:
        """Nothing: the object is still selected."""

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        """Stop the reconcile running for the object, if any."""
        key = obj.key if isinstance(obj, DeletedFinalStateUnknown) else ObjectKey.of(obj)
        self._controller.release(key)


class _Probes(http.server.ThreadingHTTPServer):
    """``/healthz`` and ``/readyz`` answering from two callables."""

    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], healthy: Callable[[], bool], ready: Callable[[], bool]
    ) -> None:
        checks = {"/healthz": healthy, "/readyz": ready}

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                check = checks.get(self.path.split("?")[0])
                if check is None:
                    self.send_error(404)
                    return
                ok = check()
                body = b"ok\n" if ok else b"not ok\n"
                self.send_response(200 if ok else 503)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                """Probes hit every few seconds; their lines would drown the log."""

        super().__init__(address, Handler)


def _passes(check: Callable[[], bool]) -> bool:
    """Run a liveness check; one that raises has failed."""
    try:
        return check()
    except Exception:
        log.exception("A liveness check raised")
        return False


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


class Manager:
    """Runs one controller for one resource; see the module docstring."""

    def __init__(  # noqa: PLR0913 - each knob is documented and defaulted
        self,
        cfg: Config,
        name: str,
        resource: Resource,
        new_reconciler: ReconcilerFactory,
        *,
        api_client: client.ApiClient | None = None,
        clock: Clock | None = None,
    ) -> None:
        """Build every part, each timed by ``clock``; nothing runs until ``run``."""
        self.config = cfg
        self.clock = clock or RealClock()
        self.registry = CollectorRegistry()
        self.api_client = api_client or load_api_client(cfg.kubeconfig)
        instrument(self.api_client, self.registry)
        self.shutdown = threading.Event()
        self._reconcile_stop = threading.Event()
        scopes: Sequence[str | None] = cfg.namespaces or (None,)
        selector = cfg.label_selector
        list_watchers = [
            CustomObjectsListWatcher(
                self.api_client,
                resource.group,
                resource.version,
                resource.plural,
                namespace,
                label_selector=str(selector),
            )
            for namespace in scopes
        ]
        store = Store()
        self._leading_since: float | None = None
        context = ManagerContext(
            self.api_client,
            store,
            cfg,
            self.registry,
            self._reconcile_stop,
            ReadYourWritesView(store, None if selector.empty else selector.selects),
            leading_since=lambda: self._leading_since,
            clock=self.clock,
            enqueue=self._enqueue,
        )
        self._closers = context.closers
        self._starters = context.starters
        self._liveness_checks = context.liveness_checks
        # Namespaces take turns for the workers, and one namespace runs at most
        # --max-concurrent-reconciles-per-namespace reconciles at once (0: no limit).
        self.controller = Controller(
            name,
            new_reconciler(context),
            self.registry,
            workers=cfg.workers,
            clock=self.clock,
            shard=by_namespace,
            max_in_flight_per_shard=cfg.max_concurrent_reconciles_per_namespace or None,
        )
        # The view first: it forgets a deleted object before the delete's key is queued.
        # With a selector, a delete may be an object leaving it: its reconcile in flight
        # is stopped (as on shutdown) before anything else hears of it.
        first: list[EventHandler] = [context.view]
        if not selector.empty:
            first.append(Departures(self.controller))
        handler = FanOut([*first, self.controller, *context.handlers])
        self.informer = Informer(
            list_watchers,
            handler,
            store=store,
            resync_period=cfg.resync_period,
            clock=self.clock,
            resource=resource.plural,
        )
        self._leader = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates "
            "backup, 1 indicates master. 'name' is the string used to identify the lease.",
            ["name"],
            registry=self.registry,
        )
        self._leader.labels(cfg.leader_election_id).set(0)
        self._elector: LeaderElector | None = None
        self._started_workers = threading.Event()
        self._lost_lease = False
        self._signal = 0
        self._threads = ThreadGroup(self.clock)

    def _enqueue(self, key: ObjectKey) -> None:
        """Queue ``key`` for the controller (made after the context that hands this out)."""
        self.controller.queue.add(key)

    def healthy(self) -> bool:
        """Every thread that should run is running, the reconciler's own ones too."""
        workers_ok = not self._started_workers.is_set() or self.controller.alive()
        return (
            self.informer.alive()
            and workers_ok
            and self._threads.alive()
            and all(_passes(check) for check in self._liveness_checks)
        )

    def ready(self) -> bool:
        """The cache has synced (a standby is ready too: it serves probes and metrics)."""
        return self.informer.has_synced()

    def run(self) -> int:
        """Run until a signal or a lost Lease; returns the process exit status."""
        self._serve()
        log.info(
            "Starting",
            identity=self.config.identity,
            namespaces=list(self.config.namespaces) or "all",
            label_selector=str(self.config.label_selector) or "all",
            workers=self.config.workers,
            leader_elect=self.config.leader_elect,
            lease=self.config.leader_election_id if self.config.leader_elect else None,
        )
        self.informer.run()
        for start in self._starters:
            start()
        if not self.informer.wait_for_cache_sync(CACHE_SYNC_TIMEOUT) and not self.shutdown.is_set():
            log.error("Caches did not sync", timeout=CACHE_SYNC_TIMEOUT)
            self.shutdown.set()
        if not self.shutdown.is_set():
            log.info("Caches synced", objects=len(self.informer.store))
            heap.settle()  # the first list's garbage: back to the OS, the cache out of GC scans
            if self.config.leader_elect:
                self._start_election()
            else:
                self._start_workers()
        self.shutdown.wait()
        return self._stop()

    def request_shutdown(self, signum: int = 0) -> None:
        """Begin a clean shutdown (``signum``: the signal that asked, 0 for none).

        Never call it from a signal handler: it takes the Event's lock (``run`` relays).
        """
        self._signal = signum
        self.shutdown.set()

    def _start_workers(self) -> None:
        if not self._started_workers.is_set() and not self.shutdown.is_set():
            self._started_workers.set()
            self.controller.run()

    def _start_election(self) -> None:
        le = LeaderElectionConfig(
            lease_name=self.config.leader_election_id,
            namespace=self.config.leader_election_namespace,
            identity=self.config.identity,
            lease_duration=self.config.lease_duration,
            renew_deadline=self.config.renew_deadline,
            retry_period=self.config.retry_period,
            field_manager=self.config.field_manager,
        )
        self._elector = LeaderElector(le, self.api_client, clock=self.clock)
        self._election_stop = threading.Event()
        self._threads.start(self._elect, "leader-election")

    def _elect(self) -> None:
        if self._elector is None:
            return
        self._elector.run(self._election_stop, self._on_started_leading, self._on_stopped_leading)

    def _on_started_leading(self) -> None:
        self._leading_since = self.clock.now()
        self._leader.labels(self.config.leader_election_id).set(1)
        self._start_workers()

    def _on_stopped_leading(self) -> None:
        self._leading_since = None
        self._leader.labels(self.config.leader_election_id).set(0)
        if self._election_stop.is_set():
            return  # our own clean shutdown released the Lease
        log.error("Lost the Lease; interrupting reconciles and exiting")
        self._lost_lease = True
        self._reconcile_stop.set()
        self.controller.interrupt()
        self.shutdown.set()

    def _stop(self) -> int:
        signum = self._signal
        log.info("Shutting down", signal=signal.Signals(signum).name if signum else None)
        drained = True
        if self._started_workers.is_set():
            drained = self.controller.shut_down(
                0.0 if self._lost_lease else self.config.shutdown_timeout
            )
        else:
            self.controller.queue.shut_down()
        self._reconcile_stop.set()
        for close in self._closers:
            close(CLOSE_TIMEOUT)
        if self._elector is not None:  # release the Lease only now that no work runs
            self._election_stop.set()
            self._threads.join_until(self.clock.now() + RELEASE_TIMEOUT)
        self.informer.stop()
        for server in self._servers:
            server.shutdown()
            server.server_close()
        log.info("Stopped", drained=drained)
        return 1 if self._lost_lease else 0

    def _serve(self) -> None:
        self._servers: list[http.server.HTTPServer] = []
        metrics_host, metrics_port = _split(self.config.metrics_bind_address)
        if metrics_port and self.config.metrics_secure:
            cert_dir = self.config.metrics_cert_dir
            secure = SecureMetricsServer(
                (metrics_host, metrics_port),
                self.registry,
                Reviewer(self.api_client, self.clock),
                Certificates(Path(cert_dir) if cert_dir else None, clock=self.clock),
            )
            threading.Thread(target=secure.serve_forever, name="metrics", daemon=True).start()
            self._servers.append(secure)
        elif metrics_port:
            server, _ = start_http_server(metrics_port, metrics_host, registry=self.registry)
            self._servers.append(server)
        probe_host, probe_port = _split(self.config.health_probe_bind_address)
        if probe_port:
            probes = _Probes((probe_host, probe_port), self.healthy, self.ready)
            threading.Thread(target=probes.serve_forever, name="probes", daemon=True).start()
            self._servers.append(probes)


def run(manager: Manager) -> int:
    """Hand SIGTERM and SIGINT to ``manager`` and run it; returns the exit status.

    The handlers only relay (``controller.signals``): setting the shutdown Event inside one
    could deadlock with the main thread beginning to wait on that same Event.
    """
    relay_signals(manager.request_shutdown)
    return manager.run()
