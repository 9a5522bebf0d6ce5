"""Reconcile workers: the informer's events become keys, and N threads reconcile them.

``Controller`` is sample-controller's shape in Python: event handlers that only enqueue
``ObjectKey``s (``on_add`` / ``on_update`` / ``on_delete``), a rate-limited work queue,
and ``run_worker`` threads looping over ``process_next_work_item`` — the one place where a
reconcile's result or exception becomes a queue action:

| reconcile                    | queue                                                   |
| ---------------------------- | ------------------------------------------------------- |
| returns ``Result()``         | ``forget``                                              |
| returns ``requeue_after=s``  | ``forget`` + ``add_after(s)``                           |
| raises ``TransientError``    | cap the key's backoff if asked, ``add_rate_limited``    |
| raises ``TerminalError``     | ``forget`` (no retry until the object changes)          |
| raises a transient API error | log without traceback, ``add_rate_limited``             |
| raises anything else (a bug) | count a panic, log with traceback, ``add_rate_limited`` |

A transient API error is what ``controller.retry.is_transient`` accepts (connection
errors, 429 and 5xx answers) escaping the reconcile after its in-call retries: an error,
not a panic. Optionally the queue hands keys out round robin between namespaces and caps
the reconciles running at once per namespace (``shard=by_namespace``,
``max_in_flight_per_shard``), so that one busy namespace cannot hold every worker.

Each reconcile gets a stop event of its own: set by ``interrupt`` (every reconcile, as on
shutdown) or by ``release(key)`` (that key's only: its object is no longer this
controller's, e.g. it left the label selection, and whatever runs for it stops as it would
on shutdown). ``done`` is called on every path, and a worker thread never dies of a
reconcile's exception. Once shutting down (or interrupted) a worker starts no new reconcile: keys
the queue still hands out, such as one re-queued by ``done`` because it changed while
being processed, are left for the next process. Metrics follow controller-runtime's
names (``controller_runtime_*``). Reconcile durations, the queue's delays and the
deadlines of ``shut_down`` are all measured on the controller's ``Clock``.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Hashable, Iterator

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from controller.cache import Object, ObjectKey
from controller.clock import Clock, RealClock
from controller.failures import describe
from controller.informer import DeletedFinalStateUnknown
from controller.ratelimit import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
)
from controller.reconciler import Reconciler, Result, TerminalError, TransientError
from controller.retry import is_transient
from controller.threads import ThreadGroup
from controller.workqueue import WorkQueue, WorkQueueMetrics

log = structlog.get_logger(__name__)

# Reconciles run Pulumi updates: minutes to hours, not controller-runtime's 60 s top bucket.
RECONCILE_BUCKETS = (0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200)
RESULTS = ("success", "error", "requeue", "requeue_after")
# Seconds interrupted reconciles get to return before shut_down gives up on them.
# Reconcilers must honour their stop event within it (the Pulumi runner kills its CLI
# 60 s after interrupting it, then writes the outcome).
INTERRUPT_TIMEOUT = 120.0


class ControllerMetrics:
    """controller-runtime's controller metrics, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        """Create the families."""
        label = ["controller"]
        self.total = Counter(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller",
            [*label, "result"],
            registry=registry,
        )
        self.errors = Counter(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller",
            label,
            registry=registry,
        )
        self.terminal_errors = Counter(
            "controller_runtime_terminal_reconcile_errors_total",
            "Total number of terminal reconciliation errors per controller",
            label,
            registry=registry,
        )
        self.panics = Counter(
            "controller_runtime_reconcile_panics_total",
            "Total number of reconciliation panics (unexpected exceptions) per controller",
            label,
            registry=registry,
        )
        self.time = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            label,
            buckets=RECONCILE_BUCKETS,
            registry=registry,
        )
        self.max_concurrent = Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            label,
            registry=registry,
        )
        self.active_workers = Gauge(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            label,
            registry=registry,
        )


def by_namespace(key: ObjectKey) -> str:
    """Shard keys by namespace (for ``Controller(shard=...)``)."""
    return key.namespace


class Controller:
    """A work queue fed by informer events and drained by reconcile workers."""

    def __init__(  # noqa: PLR0913 - each knob is documented and defaulted
        self,
        name: str,
        reconciler: Reconciler,
        registry: CollectorRegistry,
        *,
        workers: int = 1,
        clock: Clock | None = None,
        qps: float = 10.0,
        burst: int = 100,
        shard: Callable[[ObjectKey], Hashable] | None = None,
        max_in_flight_per_shard: int | None = None,
    ) -> None:
        """Build the queue with client-go's default limiter (5 ms→1000 s per key, 10 qps/100).

        ``shard`` (e.g. ``by_namespace``) makes the queue hand keys out round robin
        between shards, and ``max_in_flight_per_shard`` caps the reconciles running at
        once per shard; both default off (first come, first served, no cap). See
        ``controller.workqueue.WorkQueue``.
        """
        self.name = name
        self._reconciler = reconciler
        self._workers = workers
        self._clock = clock or RealClock()
        self._backoff = ItemExponentialFailureRateLimiter[ObjectKey]()
        limiter = MaxOfRateLimiter[ObjectKey](
            self._backoff, BucketRateLimiter[ObjectKey](qps, burst, self._clock)
        )
        self.queue = WorkQueue[ObjectKey](
            name,
            clock=self._clock,
            rate_limiter=limiter,
            metrics=WorkQueueMetrics(registry),
            shard=shard,
            max_in_flight_per_shard=max_in_flight_per_shard,
        )
        self._metrics = m = ControllerMetrics(registry)
        # Every series exists from the start, as controller-runtime does it.
        for result in RESULTS:
            m.total.labels(name, result)
        for family in (m.errors, m.terminal_errors, m.panics, m.time, m.active_workers):
            family.labels(name)
        m.max_concurrent.labels(name).set(workers)
        self._stop = threading.Event()
        # The stop event of each reconcile running now (the queue runs a key once at a time).
        self._running: dict[ObjectKey, threading.Event] = {}
        self._running_lock = threading.Lock()
        self._threads = ThreadGroup(self._clock)

    # -- event handlers: cheap, they only enqueue ---------------------------------

    def on_add(self, obj: Object) -> None:
        """Enqueue a new object."""
        self.queue.add(ObjectKey.of(obj))

    def on_update(self, old: Object, new: Object) -> None:
        """Enqueue a changed object; a resync (same object) is enqueued too, to re-check."""
        del old
        self.queue.add(ObjectKey.of(new))

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        """Enqueue a deleted object's key so the reconciler can clean up after it."""
        key = obj.key if isinstance(obj, DeletedFinalStateUnknown) else ObjectKey.of(obj)
        self.queue.add(key)

    # -- workers ------------------------------------------------------------------

    def run(self) -> None:
        """Start the worker threads; returns at once."""
        log.info("Starting workers", controller=self.name, count=self._workers)
        for index in range(self._workers):
            self._threads.start(self.run_worker, f"{self.name}-worker-{index}")

    def alive(self) -> bool:
        """True while every started worker thread runs (for /healthz)."""
        return self._threads.alive()

    def interrupt(self) -> None:
        """Ask running reconciles to return soon (their stop event is set)."""
        self._stop.set()
        with self._running_lock:
            for stop in self._running.values():
                stop.set()

    def release(self, key: ObjectKey) -> bool:
        """Stop the reconcile running for ``key``, if any, as ``interrupt`` would.

        For an object that is no longer this controller's to reconcile (it left the label
        selection): its reconcile gets the stop event a shutdown sets, and returns soon;
        the other keys' reconciles go on. True when one was running.
        """
        with self._running_lock:
            stop = self._running.get(key)
        if stop is None:
            return False
        log.info("Stopping the reconcile of an object that is no longer ours", key=str(key))
        stop.set()
        return True

    def shut_down(self, deadline: float, interrupt_timeout: float = INTERRUPT_TIMEOUT) -> bool:
        """Stop taking work, let running reconciles finish for ``deadline`` seconds.

        After the deadline the running reconciles are interrupted (their stop event is
        set) and get up to ``interrupt_timeout`` more seconds to return, so that what they
        report is written before the caller closes its writers or releases its Lease.
        Returns True when every worker finished within the deadline. Both timeouts are
        seconds of the controller's clock.
        """
        drainer = ThreadGroup(self._clock)
        drainer.start(self.queue.shut_down_with_drain, f"{self.name}-drain")
        drained = drainer.join_until(self._clock.now() + deadline)
        if not drained:
            log.warning("Drain deadline passed; interrupting reconciles", controller=self.name)
            self.interrupt()
            self.queue.shut_down()
        grace = max(deadline, 1.0) if drained else interrupt_timeout
        returned = self._threads.join_until(self._clock.now() + grace)
        if not drained and not returned:
            log.error("Interrupted reconciles did not return", controller=self.name)
        return drained

    def run_worker(self) -> None:
        """Process keys until the queue shuts down."""
        while self.process_next_work_item():
            pass

    def process_next_work_item(self) -> bool:
        """Reconcile one key and turn the outcome into a queue action; False on shutdown."""
        key = self.queue.get()
        if key is None:
            return False
        if self.queue.shutting_down() or self._stop.is_set():
            self.queue.done(key)  # stop taking work; the next process picks the key up
            return False
        active = self._metrics.active_workers.labels(self.name)
        active.inc()
        started = self._clock.now()
        try:
            with structlog.contextvars.bound_contextvars(
                controller=self.name,
                namespace=key.namespace,
                name=key.name,
                reconcile_id=uuid.uuid4().hex,
            ):
                self._handle(key)
        finally:
            self._metrics.time.labels(self.name).observe(self._clock.now() - started)
            active.dec()
            self.queue.done(key)
        return True

    @contextlib.contextmanager
    def _stop_event(self, key: ObjectKey) -> Iterator[threading.Event]:
        """The stop event of one reconcile of ``key``, registered for ``release``."""
        stop = threading.Event()
        with self._running_lock:
            self._running[key] = stop
        if self._stop.is_set():  # interrupted before this reconcile registered
            stop.set()
        try:
            yield stop
        finally:
            with self._running_lock:
                if self._running.get(key) is stop:
                    del self._running[key]

    def _handle(self, key: ObjectKey) -> None:
        with self._stop_event(key) as stop:
            self._reconcile(key, stop)

    def _reconcile(self, key: ObjectKey, stop: threading.Event) -> None:
        try:
            result = self._reconciler.reconcile(key, stop)
        except TransientError as err:
            self._count("error")
            self._metrics.errors.labels(self.name).inc()
            if err.max_backoff is not None:
                self._backoff.set_max_delay(key, err.max_backoff)
            log.info("Reconcile failed; requeuing with backoff", error=str(err))
            self.queue.add_rate_limited(key)
        except TerminalError as err:
            self._count("error")
            self._metrics.terminal_errors.labels(self.name).inc()
            log.info("Reconcile failed terminally; waiting for a change", error=str(err))
            self.queue.forget(key)
        except Exception as err:  # noqa: BLE001 - a worker never dies of a reconcile's bug
            self._unexpected(key, err)
        else:
            self._finish(key, result)

    def _unexpected(self, key: ObjectKey, err: Exception) -> None:
        """A transient API failure is an error; anything else is a bug, a panic."""
        self._count("error")
        if is_transient(err):
            self._metrics.errors.labels(self.name).inc()
            log.info("Kubernetes API call failed; requeuing with backoff", error=describe(err))
        else:
            self._metrics.panics.labels(self.name).inc()
            log.error("Reconcile raised unexpectedly; requeuing with backoff", exc_info=err)
        self.queue.add_rate_limited(key)

    def _finish(self, key: ObjectKey, result: Result) -> None:
        self.queue.forget(key)
        if result.requeue_after is not None and result.requeue_after > 0:
            self._count("requeue_after")
            self.queue.add_after(key, result.requeue_after)
        else:
            self._count("success")

    def _count(self, result: str) -> None:
        self._metrics.total.labels(self.name, result).inc()
