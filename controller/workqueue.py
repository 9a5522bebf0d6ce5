"""The work queue between the informer and the reconcile workers, with client-go's semantics.

`WorkQueue[K]` is client-go's rate-limiting work queue (`util/workqueue`: `queue.go`,
`delaying_queue.go`, `rate_limiting_queue.go`) in one class built from two parts: a FIFO
of keys guarded by one `threading.Condition`, and a `_WaitingLoop` thread holding keys
added with a delay. Guarantees, as in client-go's `doc.go`:

- Fair: keys are handed out in the order they were added; with a `shard` function, fair
  between shards first (round robin, see below) and in add order within a shard.
- Stingy: a key is never handed to two workers at once, and a key added several times
  before a worker gets it is handed out once.
- A key added while a worker processes it is queued again when the worker calls `done`.
- Multiple producers and consumers; shutdown wakes every blocked `get()`.

Sharding (optional, off by default): `shard(key)` names the key's shard (a namespace, a
tenant); `get()` takes the next key from the shard served least recently, so one shard
with many queued keys cannot delay another shard's new key behind all of them. With
`max_in_flight_per_shard`, `get()` never hands out a key whose shard already has that many
keys being processed: such keys wait for a `done()` of their shard while other shards'
keys are still handed out (so workers may idle while only capped keys are queued).

What it leaves to callers: every key returned by `get()` must be passed to `done()`, and
keys that succeeded must be passed to `forget()` to reset their backoff. Time is read
only through the injected `Clock`, so tests drive delays with a `FakeClock`.

Metrics use controller-runtime's names (`workqueue_*`, labels `name` and `controller`,
both set to the queue name) and go to the `CollectorRegistry` given to `WorkQueueMetrics`.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from controller.clock import Clock, RealClock
from controller.ratelimit import RateLimiter, default_controller_rate_limiter

K = TypeVar("K", bound=Hashable)

# client-go's maxWait: the waiting loop wakes at least this often (seconds of Clock time).
# "It's just insurance against weird things happening."
MAX_WAIT = 10.0

# ExponentialBuckets(10e-9, 10, 12), as component-base and controller-runtime use for both
# duration histograms: 1e-8 s up to 1e3 s.
DURATION_BUCKETS = tuple(10.0**exponent for exponent in range(-8, 4))

_LABELS = ("name", "controller")


class WorkQueueMetrics:
    """The `workqueue_*` metric families, registered once in `registry`.

    One instance serves any number of queues; each queue gets its own label values
    (`name` = `controller` = queue name) through `QueueMetrics`. Queue names must be
    unique among live queues sharing one instance: a second queue with the same name
    shares its counters, and its gauges replace the first queue's.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        """Create the families and register them in `registry`."""
        self.depth = Gauge(
            "workqueue_depth", "Current depth of workqueue", _LABELS, registry=registry
        )
        self.adds = Counter(
            "workqueue_adds_total",
            "Total number of adds handled by workqueue",
            _LABELS,
            registry=registry,
        )
        self.queue_duration = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            _LABELS,
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.work_duration = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            _LABELS,
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.unfinished_work = Gauge(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been "
            "observed by work_duration. Large values indicate stuck threads.",
            _LABELS,
            registry=registry,
        )
        self.longest_running_processor = Gauge(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            _LABELS,
            registry=registry,
        )
        self.retries = Counter(
            "workqueue_retries_total",
            "Total number of retries handled by workqueue",
            _LABELS,
            registry=registry,
        )


class QueueMetrics(Generic[K]):
    """One queue's series, and the timestamps client-go's `defaultQueueMetrics` keeps.

    `workqueue_unfinished_work_seconds` and `workqueue_longest_running_processor_seconds`
    are computed at scrape time (`Gauge.set_function`) from the start times of keys being
    processed, instead of client-go's 500 ms ticker: always current, and no thread.
    The timestamps have their own lock, so a scrape never waits for the queue's lock.
    """

    def __init__(self, families: WorkQueueMetrics, name: str, clock: Clock) -> None:
        """Bind the series of queue `name`; durations are measured with `clock`."""
        labels = {"name": name, "controller": name}
        self._clock = clock
        self._depth = families.depth.labels(**labels)
        self._adds = families.adds.labels(**labels)
        self._queue_duration = families.queue_duration.labels(**labels)
        self._work_duration = families.work_duration.labels(**labels)
        self._retries = families.retries.labels(**labels)
        self._lock = threading.Lock()
        # Guarded by _lock. _add_times: first add of each key not yet handed out by get();
        # _processing_starts: when get() handed out each key not yet done().
        self._add_times: dict[K, float] = {}
        self._processing_starts: dict[K, float] = {}
        families.unfinished_work.labels(**labels).set_function(self.unfinished_work_seconds)
        families.longest_running_processor.labels(**labels).set_function(
            self.longest_running_processor_seconds
        )

    def add(self, key: K) -> None:
        """Count an effective add (the key became dirty)."""
        self._adds.inc()
        self._depth.inc()
        with self._lock:
            self._add_times.setdefault(key, self._clock.now())

    def get(self, key: K) -> None:
        """Record that `get()` handed out `key`: depth down, time-in-queue observed."""
        self._depth.dec()
        now = self._clock.now()
        with self._lock:
            added = self._add_times.pop(key, None)
            self._processing_starts[key] = now
        if added is not None:
            self._queue_duration.observe(now - added)

    def done(self, key: K) -> None:
        """Record that processing `key` finished: work duration observed."""
        now = self._clock.now()
        with self._lock:
            started = self._processing_starts.pop(key, None)
        if started is not None:
            self._work_duration.observe(now - started)

    def retry(self) -> None:
        """Count a delayed add (`add_after` or `add_rate_limited`)."""
        self._retries.inc()

    def unfinished_work_seconds(self) -> float:
        """Return the summed age, in seconds, of every key being processed."""
        now = self._clock.now()
        with self._lock:
            return sum(now - started for started in self._processing_starts.values())

    def longest_running_processor_seconds(self) -> float:
        """Return the age, in seconds, of the oldest key being processed (0 if none)."""
        now = self._clock.now()
        with self._lock:
            return max((now - s for s in self._processing_starts.values()), default=0.0)


class _WaitingLoop(Generic[K]):
    """Keys waiting for their ready time, handed to `add` by one thread once it passes.

    Re-adding a waiting key only ever moves it earlier ("update the time only if it would
    cause the item to be queued sooner", client-go `insert`). `stop()` discards every
    waiting key and ends the thread.
    """

    def __init__(self, name: str, clock: Clock, add: Callable[[K], None]) -> None:
        self._clock = clock
        self._add = add
        self._cond = threading.Condition()
        # Guarded by _cond. _heap holds (ready_at, seq, key); an entry is live only while
        # _entries[key] == (ready_at, seq), older entries for the key are skipped when they
        # reach the top. _entries has exactly the keys still waiting.
        self._heap: list[tuple[float, int, K]] = []
        self._entries: dict[K, tuple[float, int]] = {}
        self._seq = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(
            target=self._run, name=f"workqueue-{name}-waiting", daemon=True
        )
        self._thread.start()

    def add_at(self, key: K, ready_at: float) -> None:
        """Hand `key` to `add` at `ready_at`, unless it already waits for an earlier time."""
        with self._cond:
            if self._stopped:
                return
            current = self._entries.get(key)
            if current is not None and current[0] <= ready_at:
                return
            seq = next(self._seq)
            self._entries[key] = (ready_at, seq)
            heapq.heappush(self._heap, (ready_at, seq, key))
            self._cond.notify()

    def stop(self) -> None:
        """Discard the waiting keys and wait for the thread to end."""
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._entries.clear()
            self._cond.notify_all()
        self._thread.join()

    def _run(self) -> None:
        while (ready := self._wait_for_ready()) is not None:
            # Outside our lock: add() takes the queue's lock, and may drop the key if the
            # queue is shutting down, exactly like a late Add in client-go.
            for key in ready:
                self._add(key)

    def _wait_for_ready(self) -> list[K] | None:
        """Block until some keys are ready and return them; return None once stopped."""
        with self._cond:
            while not self._stopped:
                now = self._clock.now()
                ready = self._pop_ready(now)
                if ready:
                    return ready
                deadline = now + MAX_WAIT
                if self._heap:
                    deadline = min(deadline, self._heap[0][0])
                self._clock.wait_until(self._cond, deadline)
            return None

    def _pop_ready(self, now: float) -> list[K]:
        ready: list[K] = []
        while self._heap:
            ready_at, seq, key = self._heap[0]
            if self._entries.get(key) != (ready_at, seq):
                heapq.heappop(self._heap)  # Superseded by an earlier add_at.
                continue
            if ready_at > now:
                break
            heapq.heappop(self._heap)
            del self._entries[key]
            ready.append(key)
        return ready


def _one_shard(key: Hashable) -> None:
    """The shard of every key when the queue is not sharded: one FIFO for all."""
    del key


class _ShardedFifo(Generic[K]):
    """Queued keys in per-shard FIFOs, handed out round robin; not thread-safe.

    The `WorkQueue` calls every method under its own lock. `pop` takes the head of the
    queued shard served least recently, skipping shards at the in-flight cap; a shard
    with nothing queued and nothing in flight is forgotten, so when it comes back it
    counts as never served and goes first (shards never served go in arrival order).
    With a single shard this is a plain FIFO.
    """

    def __init__(self, shard: Callable[[K], Hashable], max_in_flight: int | None) -> None:
        self._shard = shard
        self._max_in_flight = max_in_flight
        # _queues: the shards with queued keys, in the order they last became non-empty.
        # _in_flight: keys handed out and not finished, per shard (no zero entries).
        # _last_served: serve number of each shard's latest pop, while it has keys
        # queued or in flight.
        self._queues: dict[Hashable, deque[K]] = {}
        self._in_flight: dict[Hashable, int] = {}
        self._last_served: dict[Hashable, int] = {}
        self._serves = itertools.count()
        self._queued = 0

    def __len__(self) -> int:
        return self._queued

    def push(self, key: K) -> None:
        """Queue `key` at the end of its shard's FIFO."""
        self._queues.setdefault(self._shard(key), deque()).append(key)
        self._queued += 1

    def pop(self) -> K | None:
        """Take the next key to hand out and count it in flight; None if all are capped."""
        chosen = self._next_shard()
        if chosen is None:
            return None
        shard, keys = chosen
        key = keys.popleft()
        if not keys:
            del self._queues[shard]
        self._queued -= 1
        self._last_served[shard] = next(self._serves)
        self._in_flight[shard] = self._in_flight.get(shard, 0) + 1
        return key

    def finish(self, key: K) -> None:
        """Stop counting `key` (handed out by `pop`) in flight."""
        shard = self._shard(key)
        left = self._in_flight[shard] - 1
        if left:
            self._in_flight[shard] = left
            return
        del self._in_flight[shard]
        if shard not in self._queues:
            del self._last_served[shard]

    def _next_shard(self) -> tuple[Hashable, deque[K]] | None:
        """The uncapped queued shard served least recently (first in order on ties)."""
        best: tuple[Hashable, deque[K]] | None = None
        best_rank = 0
        for shard, keys in self._queues.items():
            if self._capped(shard):
                continue
            rank = self._last_served.get(shard, -1)
            if best is None or rank < best_rank:
                best, best_rank = (shard, keys), rank
        return best

    def _capped(self, shard: Hashable) -> bool:
        cap = self._max_in_flight
        return cap is not None and self._in_flight.get(shard, 0) >= cap


class WorkQueue(Generic[K]):
    """Fair, stingy, rate-limited FIFO of hashable keys, shared by producers and workers.

    `get()` blocks until a key is available and returns it; after `shut_down()` it keeps
    returning the keys still queued (a key of a shard at its in-flight cap once its shard
    has a `done()`) and then returns None, which tells the worker to exit.
    (None is never a key: `K` is the key type, `K | None` the result.) Callers must call
    `done(key)` for every key `get()` returned. A key added while it is being processed is
    queued again after `done`. `len()` counts queued keys only (not processing, not
    waiting); it is for information, never for gating `add` or `get`.

    Delays: `add_after(key, seconds)` waits on the injected `Clock`; `add_rate_limited(key)`
    asks the `RateLimiter` for the delay (default: client-go's controller rate limiter).
    """

    def __init__(  # noqa: PLR0913 - each knob is documented and defaulted
        self,
        name: str,
        *,
        clock: Clock | None = None,
        rate_limiter: RateLimiter[K] | None = None,
        metrics: WorkQueueMetrics | None = None,
        shard: Callable[[K], Hashable] | None = None,
        max_in_flight_per_shard: int | None = None,
    ) -> None:
        """Create the queue `name` and start its waiting thread.

        Args:
            name: The queue's name, used as the `name` and `controller` metric labels.
            clock: Time source for delays and metrics; `RealClock()` if omitted.
            rate_limiter: Decides `add_rate_limited` delays; if omitted,
                `default_controller_rate_limiter(clock)`.
            metrics: Where to record `workqueue_*` metrics; if omitted they go to a
                private registry nobody scrapes.
            shard: The shard of a key (e.g. its namespace); the same key must always give
                the same shard. Keys are handed out round robin between shards. If
                omitted, every key is in one shard: plain FIFO.
            max_in_flight_per_shard: At most this many keys of one shard are processed
                at once; None (the default) for no limit.

        Raises:
            ValueError: `max_in_flight_per_shard` is less than 1.
        """
        if max_in_flight_per_shard is not None and max_in_flight_per_shard < 1:
            msg = f"max_in_flight_per_shard must be at least 1, not {max_in_flight_per_shard}"
            raise ValueError(msg)
        self.name = name
        self._clock: Clock = RealClock() if clock is None else clock
        self._rate_limiter: RateLimiter[K] = (
            default_controller_rate_limiter(self._clock) if rate_limiter is None else rate_limiter
        )
        families = WorkQueueMetrics(CollectorRegistry()) if metrics is None else metrics
        self._metrics: QueueMetrics[K] = QueueMetrics(families, name, self._clock)
        self._cond = threading.Condition()
        # Guarded by _cond.
        # _queue: keys to hand out, per shard; each is in _dirty and not in _processing.
        # _dirty: every key that needs processing (queued, or re-added while processing).
        # _processing: keys handed out by get() and not yet done(); may also be in _dirty.
        # _drain: shut_down_with_drain() is waiting for _processing to empty.
        self._queue: _ShardedFifo[K] = _ShardedFifo(
            _one_shard if shard is None else shard, max_in_flight_per_shard
        )
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._shutting_down = False
        self._drain = False
        self._waiting: _WaitingLoop[K] = _WaitingLoop(name, self._clock, self.add)

    def add(self, key: K) -> None:
        """Mark `key` as needing processing; ignored after shutdown and while already dirty."""
        with self._cond:
            if self._shutting_down or key in self._dirty:
                return
            self._metrics.add(key)
            self._dirty.add(key)
            if key in self._processing:
                return  # done() queues it again.
            self._queue.push(key)
            self._cond.notify()

    def get(self) -> K | None:
        """Block until a key can be handed out and return it; None once shut down and empty.

        A queued key of a shard at its in-flight cap cannot be handed out: `get()` waits
        for that shard's `done()` (or another key), even after shutdown. The caller now
        owns the key and must call `done(key)` when finished with it; no other worker
        gets it until then.
        """
        with self._cond:
            while (key := self._queue.pop()) is None:
                if self._shutting_down and not self._queue:
                    return None
                # Through the clock, so that a FakeClock counts a blocked get() as a waiter.
                self._clock.wait_until(self._cond, None)
            self._metrics.get(key)
            self._processing.add(key)
            self._dirty.discard(key)
            return key

    def done(self, key: K) -> None:
        """Mark `key` as processed; if it was added meanwhile, queue it again.

        Raises:
            ValueError: `key` is not being processed (no `get()` returned it, or `done` was
                already called).
        """
        with self._cond:
            if key not in self._processing:
                msg = f"done() called for {key!r}, which is not being processed"
                raise ValueError(msg)
            self._metrics.done(key)
            self._processing.remove(key)
            if key in self._dirty:
                self._queue.push(key)  # Before finish(): the shard stays remembered.
            self._queue.finish(key)
            # Wakes get()s (a key is queued again, or its shard is below its cap again)
            # and, once nothing is processing, shut_down_with_drain().
            self._cond.notify_all()

    def __len__(self) -> int:
        """Return the number of queued keys (informational only)."""
        with self._cond:
            return len(self._queue)

    def shut_down(self) -> None:
        """Stop accepting keys, wake every `get()`, and discard keys waiting for a delay.

        Queued keys are still handed out by `get()`; it returns None once they are gone.
        Also ends a `shut_down_with_drain()` that is still waiting.
        """
        with self._cond:
            self._drain = False
            self._shutting_down = True
            self._cond.notify_all()
        self._waiting.stop()

    def shut_down_with_drain(self) -> None:
        """Shut down like `shut_down()`, then block until every processing key is done.

        Workers must call `done` for each key they got, otherwise this blocks forever
        (unless another thread calls `shut_down()`, which ends the wait).
        """
        with self._cond:
            self._drain = True
            self._shutting_down = True
            self._cond.notify_all()
        self._waiting.stop()
        with self._cond:
            while self._processing and self._drain:
                self._clock.wait_until(self._cond, None)

    def shutting_down(self) -> bool:
        """Return whether `shut_down` or `shut_down_with_drain` was called."""
        with self._cond:
            return self._shutting_down

    def add_after(self, key: K, delay: float) -> None:
        """Add `key` after `delay` seconds; at once if `delay <= 0`; dropped after shutdown.

        A key already waiting keeps the earlier of its two ready times. Counts a retry
        (`workqueue_retries_total`), zero delays included, as client-go does.
        """
        if self.shutting_down():
            return
        self._metrics.retry()
        if delay <= 0:
            self.add(key)
            return
        self._waiting.add_at(key, self._clock.now() + delay)

    def add_rate_limited(self, key: K) -> None:
        """Add `key` after the delay the rate limiter gives it (which records a failure)."""
        self.add_after(key, self._rate_limiter.when(key))

    def forget(self, key: K) -> None:
        """Reset the rate limiter's failure tracking for `key`; `done` is still required."""
        self._rate_limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        """Return how many rate-limited requeues of `key` the rate limiter tracks."""
        return self._rate_limiter.num_requeues(key)
