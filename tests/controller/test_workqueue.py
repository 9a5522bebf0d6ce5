"""The work queue contract: fair, stingy, re-add while processing, delays, shutdown, metrics."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterator

import pytest
from prometheus_client import CollectorRegistry

from controller.clock import FakeClock
from controller.ratelimit import ItemExponentialFailureRateLimiter, RateLimiter
from controller.workqueue import DURATION_BUCKETS, WorkQueue, WorkQueueMetrics

# Real seconds a helper thread may take to react; only ever reached by a failing test.
JOIN_TIMEOUT = 5.0
# Real seconds during which a thread that must stay blocked is watched.
STILL_BLOCKED = 0.05
LABELS = {"name": "stacks", "controller": "stacks"}

MakeQueue = Callable[..., WorkQueue[str]]


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock away from zero, so nothing relies on time starting at 0."""
    return FakeClock(start=1000.0)


@pytest.fixture
def registry() -> CollectorRegistry:
    """A fresh registry per test."""
    return CollectorRegistry()


@pytest.fixture
def make_queue(clock: FakeClock, registry: CollectorRegistry) -> Iterator[MakeQueue]:
    """Build the test's queue ("stacks") and shut it down afterwards, releasing any waiter."""
    queues: list[WorkQueue[str]] = []

    def make(
        rate_limiter: RateLimiter[str] | None = None,
        shard: Callable[[str], Hashable] | None = None,
        max_in_flight_per_shard: int | None = None,
    ) -> WorkQueue[str]:
        queue = WorkQueue[str](
            "stacks",
            clock=clock,
            rate_limiter=rate_limiter,
            metrics=WorkQueueMetrics(registry),
            shard=shard,
            max_in_flight_per_shard=max_in_flight_per_shard,
        )
        queues.append(queue)
        return queue

    yield make
    for queue in queues:
        queue.shut_down()


@pytest.fixture
def queue(make_queue: MakeQueue) -> WorkQueue[str]:
    """A queue with the default controller rate limiter."""
    return make_queue()


def start_thread(target: Callable[[], None]) -> threading.Thread:
    """Start `target` in a daemon thread."""
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def start_get(queue: WorkQueue[str]) -> tuple[threading.Thread, list[str | None]]:
    """Call queue.get() in a thread; its result lands in the returned list."""
    results: list[str | None] = []
    return start_thread(lambda: results.append(queue.get())), results


def join(thread: threading.Thread) -> None:
    """Join `thread`, failing the test if it is still blocked after JOIN_TIMEOUT."""
    thread.join(JOIN_TIMEOUT)
    assert not thread.is_alive(), "thread still blocked"


def step(clock: FakeClock, seconds: float) -> None:
    """Advance the clock and wait until the queue's waiting loop has reacted and blocked again."""
    clock.step(seconds)
    assert clock.wait_for_waiters(1), "the waiting loop did not block again"


def drain(queue: WorkQueue[str]) -> list[str]:
    """Get and finish every queued key, in order."""
    keys: list[str] = []
    while len(queue):
        key = queue.get()
        assert key is not None
        queue.done(key)
        keys.append(key)
    return keys


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    """Read one sample of the "stacks" queue from the registry."""
    return registry.get_sample_value(name, {**LABELS, **labels})


# --- add / get / done -------------------------------------------------------------------


def test_get_hands_out_keys_in_add_order(queue: WorkQueue[str]) -> None:
    """Keys come out first in, first out."""
    for key in ("a", "b", "c"):
        queue.add(key)
    assert drain(queue) == ["a", "b", "c"]


def test_adds_before_processing_collapse_to_one(queue: WorkQueue[str]) -> None:
    """A key added three times before a worker gets it is handed out once."""
    for key in ("a", "b", "a", "a"):
        queue.add(key)
    assert len(queue) == 2
    assert drain(queue) == ["a", "b"]


def test_key_being_processed_is_not_handed_to_another_worker(queue: WorkQueue[str]) -> None:
    """Re-adding a key in processing does not queue it; other keys still come out."""
    queue.add("a")
    assert queue.get() == "a"
    queue.add("a")
    queue.add("b")
    assert len(queue) == 1
    assert queue.get() == "b"
    assert len(queue) == 0


def test_key_re_added_while_processing_is_queued_after_done(queue: WorkQueue[str]) -> None:
    """done() puts back a key that was added while it was processed, once."""
    queue.add("a")
    assert queue.get() == "a"
    queue.add("a")
    queue.add("a")
    queue.done("a")
    assert len(queue) == 1
    assert drain(queue) == ["a"]


def test_done_without_re_add_does_not_requeue(queue: WorkQueue[str]) -> None:
    """A key finished without being re-added leaves the queue empty."""
    queue.add("a")
    assert queue.get() == "a"
    queue.done("a")
    assert len(queue) == 0


@pytest.mark.parametrize(
    "prepare",
    [
        pytest.param(lambda _queue: None, id="never-got"),
        pytest.param(lambda queue: queue.add("a"), id="queued-not-got"),
        pytest.param(lambda queue: [queue.add("a"), queue.done(queue.get())], id="done-twice"),
    ],
)
def test_done_for_key_not_processing_raises(
    queue: WorkQueue[str], prepare: Callable[[WorkQueue[str]], object]
) -> None:
    """done() refuses a key no worker holds, instead of corrupting the queue."""
    prepare(queue)
    with pytest.raises(ValueError, match="not being processed"):
        queue.done("a")


def test_blocked_get_wakes_on_add(queue: WorkQueue[str]) -> None:
    """A worker blocked in get() receives the next added key."""
    thread, results = start_get(queue)
    queue.add("a")
    join(thread)
    assert results == ["a"]


def test_concurrent_workers_never_share_a_key(queue: WorkQueue[str]) -> None:
    """Under four workers and a busy producer, no key is ever processed twice at once."""
    lock = threading.Lock()
    in_flight: set[str] = set()
    overlaps: list[str] = []
    processed: list[str] = []

    def work() -> None:
        while (key := queue.get()) is not None:
            with lock:
                if key in in_flight:
                    overlaps.append(key)
                in_flight.add(key)
            with lock:
                in_flight.discard(key)
                processed.append(key)
            queue.done(key)

    workers = [start_thread(work) for _ in range(4)]
    for n in range(2000):
        queue.add(f"key-{n % 7}")
    queue.shut_down_with_drain()
    for worker in workers:
        join(worker)
    assert overlaps == []
    assert {f"key-{n}" for n in range(7)} <= set(processed)
    assert len(processed) <= 2000


# --- shutdown ----------------------------------------------------------------------------


def test_shut_down_hands_out_remaining_keys_then_none(queue: WorkQueue[str]) -> None:
    """After shut_down, get() still returns queued keys, then None every time."""
    queue.add("a")
    queue.add("b")
    queue.shut_down()
    assert queue.shutting_down()
    assert queue.get() == "a"
    assert queue.get() == "b"
    assert queue.get() is None
    assert queue.get() is None


def test_shut_down_wakes_every_blocked_get(queue: WorkQueue[str]) -> None:
    """Workers blocked in get() all return None on shut_down."""
    getters = [start_get(queue) for _ in range(3)]
    queue.shut_down()
    for thread, results in getters:
        join(thread)
        assert results == [None]


@pytest.mark.parametrize(
    "add",
    [
        pytest.param(lambda queue: queue.add("a"), id="add"),
        pytest.param(lambda queue: queue.add_after("a", 0.0), id="add-after-zero"),
        pytest.param(lambda queue: queue.add_after("a", 1.0), id="add-after-delay"),
        pytest.param(lambda queue: queue.add_rate_limited("a"), id="add-rate-limited"),
    ],
)
def test_adds_after_shut_down_are_dropped(
    queue: WorkQueue[str],
    clock: FakeClock,
    registry: CollectorRegistry,
    add: Callable[[WorkQueue[str]], None],
) -> None:
    """Every kind of add is ignored once the queue is shutting down, and counts nothing."""
    queue.shut_down()
    add(queue)
    clock.step(10.0)
    assert len(queue) == 0
    assert queue.get() is None
    assert sample(registry, "workqueue_adds_total") == 0
    assert sample(registry, "workqueue_retries_total") == 0


def test_shut_down_with_drain_waits_for_processing_keys(queue: WorkQueue[str]) -> None:
    """shut_down_with_drain returns only after every key handed out is done."""
    queue.add("a")
    queue.add("b")
    assert queue.get() == "a"
    assert queue.get() == "b"
    drainer = start_thread(queue.shut_down_with_drain)

    queue.done("a")
    drainer.join(STILL_BLOCKED)
    assert drainer.is_alive(), "returned while b was still processing"
    assert queue.shutting_down()

    queue.done("b")
    join(drainer)


def test_shut_down_with_drain_returns_at_once_when_idle(queue: WorkQueue[str]) -> None:
    """With nothing processing, shut_down_with_drain does not block."""
    join(start_thread(queue.shut_down_with_drain))
    assert queue.get() is None


def test_shut_down_ends_a_waiting_drain(queue: WorkQueue[str]) -> None:
    """A later shut_down() releases shut_down_with_drain even if a key is never done."""
    queue.add("a")
    assert queue.get() == "a"
    drainer = start_thread(queue.shut_down_with_drain)
    drainer.join(STILL_BLOCKED)
    assert drainer.is_alive()
    queue.shut_down()
    join(drainer)


def test_shut_down_discards_waiting_keys(queue: WorkQueue[str], clock: FakeClock) -> None:
    """Keys waiting for a delay are dropped at shutdown and never reach get()."""
    queue.add_after("a", 1.0)
    queue.shut_down()
    clock.step(5.0)
    assert len(queue) == 0
    assert queue.get() is None


# --- add_after ---------------------------------------------------------------------------


def test_add_after_queues_key_once_delay_passed(queue: WorkQueue[str], clock: FakeClock) -> None:
    """A delayed key stays out of the queue until the clock reaches its ready time."""
    queue.add_after("a", 1.0)
    step(clock, 0.5)
    assert len(queue) == 0
    step(clock, 0.5)
    assert drain(queue) == ["a"]


@pytest.mark.parametrize("delay", [pytest.param(0.0, id="zero"), pytest.param(-3.0, id="negative")])
def test_add_after_without_positive_delay_adds_now(queue: WorkQueue[str], delay: float) -> None:
    """A zero or negative delay queues the key immediately, without the waiting loop."""
    queue.add_after("a", delay)
    assert len(queue) == 1


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param(2.0, 1.0, id="earlier-wins"),
        pytest.param(1.0, 2.0, id="later-ignored"),
    ],
)
def test_add_after_keeps_earliest_ready_time(
    queue: WorkQueue[str], clock: FakeClock, first: float, second: float
) -> None:
    """Re-adding a waiting key can only move it earlier, and it fires once."""
    queue.add_after("a", first)
    queue.add_after("a", second)
    step(clock, 0.5)
    assert len(queue) == 0
    step(clock, 0.5)
    assert drain(queue) == ["a"]
    step(clock, 5.0)
    assert len(queue) == 0


def test_add_after_releases_keys_in_ready_order(queue: WorkQueue[str], clock: FakeClock) -> None:
    """Keys that become ready together are queued by ready time, not by add order."""
    queue.add_after("late", 3.0)
    queue.add_after("early", 1.0)
    queue.add_after("middle", 2.0)
    step(clock, 3.0)
    assert drain(queue) == ["early", "middle", "late"]


def test_add_after_for_queued_key_is_deduplicated(queue: WorkQueue[str], clock: FakeClock) -> None:
    """A delayed key that is already queued when it fires is not queued twice."""
    queue.add("a")
    queue.add_after("a", 1.0)
    step(clock, 1.0)
    assert drain(queue) == ["a"]


# --- rate limiting -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cap", "expected"),
    [
        pytest.param(None, [0.5, 1.0, 2.0, 4.0, 4.0], id="doubling-up-to-max"),
        pytest.param(1.0, [0.5, 1.0, 1.0, 1.0], id="per-item-cap"),
    ],
)
def test_add_rate_limited_backs_off_per_failure(
    make_queue: MakeQueue, clock: FakeClock, cap: float | None, expected: list[float]
) -> None:
    """Each add_rate_limited waits the limiter's next delay before the key is queued."""
    limiter = ItemExponentialFailureRateLimiter[str](base=0.5, max_delay=4.0)
    if cap is not None:
        limiter.set_max_delay("a", cap)
    queue = make_queue(limiter)
    for failures, delay in enumerate(expected, start=1):
        queue.add_rate_limited("a")
        step(clock, delay - 0.25)
        assert len(queue) == 0, f"queued before its {delay} s delay"
        step(clock, 0.25)
        assert drain(queue) == ["a"]
        assert queue.num_requeues("a") == failures


def test_forget_resets_backoff(make_queue: MakeQueue, clock: FakeClock) -> None:
    """After forget, num_requeues is 0 and the next delay is the base delay again."""
    queue = make_queue(ItemExponentialFailureRateLimiter[str](base=0.5, max_delay=4.0))
    for _ in range(3):
        queue.add_rate_limited("a")  # 0.5 s, 1 s, 2 s: the earliest, 0.5 s, wins.
    step(clock, 0.5)
    assert drain(queue) == ["a"]
    assert queue.num_requeues("a") == 3
    queue.forget("a")
    assert queue.num_requeues("a") == 0
    queue.add_rate_limited("a")  # 4 s had the failures not been forgotten.
    step(clock, 0.5)
    assert drain(queue) == ["a"]


def test_default_rate_limiter_starts_at_5_ms(queue: WorkQueue[str], clock: FakeClock) -> None:
    """The default limiter delays a first failure by 5 ms and the second by 10 ms."""
    queue.add_rate_limited("a")
    step(clock, 0.005)
    assert drain(queue) == ["a"]
    queue.add_rate_limited("a")
    step(clock, 0.005)
    assert len(queue) == 0
    step(clock, 0.005)
    assert drain(queue) == ["a"]
    assert queue.num_requeues("a") == 2


# --- metrics -----------------------------------------------------------------------------


def test_metrics_count_adds_and_depth(queue: WorkQueue[str], registry: CollectorRegistry) -> None:
    """adds_total counts effective adds; depth counts dirty keys and drops on get."""
    queue.add("a")
    queue.add("b")
    queue.add("a")
    assert sample(registry, "workqueue_adds_total") == 2
    assert sample(registry, "workqueue_depth") == 2
    assert queue.get() == "a"
    assert sample(registry, "workqueue_depth") == 1


def test_metrics_depth_counts_key_re_added_while_processing(
    queue: WorkQueue[str], registry: CollectorRegistry
) -> None:
    """As in client-go, a key re-added during processing counts in depth before done()."""
    queue.add("a")
    assert queue.get() == "a"
    queue.add("a")
    assert len(queue) == 0
    assert sample(registry, "workqueue_depth") == 1
    assert sample(registry, "workqueue_adds_total") == 2
    queue.done("a")
    assert drain(queue) == ["a"]
    assert sample(registry, "workqueue_depth") == 0


def test_metrics_observe_queue_and_work_durations(
    queue: WorkQueue[str], clock: FakeClock, registry: CollectorRegistry
) -> None:
    """Time from first add to get, and from get to done, land in the two histograms."""
    queue.add("a")
    clock.step(2.0)
    queue.add("a")
    assert queue.get() == "a"
    clock.step(30.0)
    queue.done("a")
    assert sample(registry, "workqueue_queue_duration_seconds_count") == 1
    assert sample(registry, "workqueue_queue_duration_seconds_sum") == 2.0
    assert sample(registry, "workqueue_queue_duration_seconds_bucket", le="1.0") == 0
    assert sample(registry, "workqueue_queue_duration_seconds_bucket", le="10.0") == 1
    assert sample(registry, "workqueue_work_duration_seconds_count") == 1
    assert sample(registry, "workqueue_work_duration_seconds_sum") == 30.0
    assert sample(registry, "workqueue_work_duration_seconds_bucket", le="10.0") == 0
    assert sample(registry, "workqueue_work_duration_seconds_bucket", le="100.0") == 1


def test_metrics_duration_buckets_span_10ns_to_1000s(
    queue: WorkQueue[str], registry: CollectorRegistry
) -> None:
    """Both histograms use client-go's twelve buckets from 1e-8 s to 1e3 s, times ten each."""
    del queue  # Creates the series.
    expected = [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0, 1000.0]
    assert list(DURATION_BUCKETS) == pytest.approx(expected)
    for name in ("workqueue_queue_duration_seconds", "workqueue_work_duration_seconds"):
        bounds = [
            s.labels["le"]
            for metric in registry.collect()
            for s in metric.samples
            if s.name == f"{name}_bucket" and s.labels["name"] == "stacks"
        ]
        assert [float(bound) for bound in bounds[:-1]] == pytest.approx(expected)
        assert bounds[-1] == "+Inf"


def test_metrics_count_every_delayed_add_as_retry(
    queue: WorkQueue[str], registry: CollectorRegistry
) -> None:
    """add_after (zero delay included) and add_rate_limited count retries; add does not."""
    queue.add("plain")
    assert sample(registry, "workqueue_retries_total") == 0
    queue.add_after("a", 0.0)
    queue.add_after("b", 1.0)
    queue.add_rate_limited("c")
    assert sample(registry, "workqueue_retries_total") == 3


def test_metrics_report_unfinished_and_longest_running_work(
    queue: WorkQueue[str], clock: FakeClock, registry: CollectorRegistry
) -> None:
    """The gauges sum and max the ages of keys being processed, as of the scrape."""
    assert sample(registry, "workqueue_unfinished_work_seconds") == 0
    assert sample(registry, "workqueue_longest_running_processor_seconds") == 0
    queue.add("a")
    queue.add("b")
    assert queue.get() == "a"
    clock.step(2.0)
    assert queue.get() == "b"
    clock.step(1.0)
    assert sample(registry, "workqueue_unfinished_work_seconds") == 4.0
    assert sample(registry, "workqueue_longest_running_processor_seconds") == 3.0
    queue.done("a")
    assert sample(registry, "workqueue_unfinished_work_seconds") == 1.0
    assert sample(registry, "workqueue_longest_running_processor_seconds") == 1.0
    queue.done("b")
    assert sample(registry, "workqueue_unfinished_work_seconds") == 0


def test_queue_without_metrics_registry_works(clock: FakeClock) -> None:
    """A queue built without WorkQueueMetrics behaves the same and records nowhere visible."""
    queue = WorkQueue[str]("private", clock=clock)
    try:
        queue.add("a")
        assert drain(queue) == ["a"]
    finally:
        queue.shut_down()


# --- shards: round robin between shards, in-flight cap per shard ---------------------------


def first_letter(key: str) -> str:
    """The shard of a test key: its first letter ("a1" is in shard "a")."""
    return key[0]


def sharded(make_queue: MakeQueue, cap: int | None = None) -> WorkQueue[str]:
    """A queue sharded by first letter, with at most `cap` keys of a shard in flight."""
    return make_queue(shard=first_letter, max_in_flight_per_shard=cap)


def get_blocks(queue: WorkQueue[str], clock: FakeClock, waiters: int) -> Callable[[], str | None]:
    """Start a get(), wait until it is blocked, and return a function awaiting its key.

    `waiters` counts every thread then blocked on the clock: the getter, plus the
    waiting loop while the queue is not shut down.
    """
    thread, results = start_get(queue)
    assert clock.wait_for_waiters(waiters), "get() did not block"
    assert results == [], "get() returned instead of blocking"

    def result() -> str | None:
        join(thread)
        return results[0]

    return result


def test_shards_take_turns_and_keep_add_order_within_a_shard(make_queue: MakeQueue) -> None:
    """One key per shard in turn, each shard's keys first in, first out."""
    queue = sharded(make_queue)
    for key in ("a1", "a2", "a3", "b1", "b2", "c1"):
        queue.add(key)
    assert drain(queue) == ["a1", "b1", "c1", "a2", "b2", "a3"]


def test_a_new_shard_goes_before_a_busy_one(make_queue: MakeQueue) -> None:
    """A shard never served yet goes before one that was: b1 before a3 (FIFO: a3 first)."""
    queue = sharded(make_queue)
    for key in ("a1", "a2", "a3"):
        queue.add(key)
    assert queue.get() == "a1"
    assert queue.get() == "a2"
    queue.add("b1")
    queue.done("a1")
    assert queue.get() == "b1"
    assert queue.get() == "a3"


def test_cap_skips_a_shard_at_its_limit(make_queue: MakeQueue) -> None:
    """With a's cap reached, get() hands out b1 although a2 was queued before it."""
    queue = sharded(make_queue, cap=2)
    for key in ("a1", "a2", "a3", "b1"):
        queue.add(key)
    assert queue.get() == "a1"
    assert queue.get() == "b1"
    assert queue.get() == "a2"
    assert len(queue) == 1
    queue.done("a1")
    assert queue.get() == "a3"


def test_get_waits_for_the_capped_shards_done(make_queue: MakeQueue, clock: FakeClock) -> None:
    """With only capped keys queued, get() blocks; done() of that shard releases it."""
    queue = sharded(make_queue, cap=1)
    queue.add("a1")
    queue.add("a2")
    assert queue.get() == "a1"
    got = get_blocks(queue, clock, waiters=2)
    queue.done("a1")
    assert got() == "a2"


def test_a_capped_shard_does_not_block_other_shards(
    make_queue: MakeQueue, clock: FakeClock
) -> None:
    """A get() waiting behind a capped shard takes another shard's new key at once."""
    queue = sharded(make_queue, cap=1)
    queue.add("a1")
    queue.add("a2")
    assert queue.get() == "a1"
    got = get_blocks(queue, clock, waiters=2)
    queue.add("b1")
    assert got() == "b1"
    assert len(queue) == 1


def test_cap_holds_under_concurrent_workers(make_queue: MakeQueue, clock: FakeClock) -> None:
    """Four workers holding their keys: two of a's run, b's one, the fourth worker waits.

    Then, released, they process everything, never more than two of a shard at once.
    """
    queue = sharded(make_queue, cap=2)
    cond = threading.Condition()
    in_flight: list[str] = []
    most = {"a": 0, "b": 0}
    processed: list[str] = []
    release = threading.Event()

    def work() -> None:
        while (key := queue.get()) is not None:
            with cond:
                in_flight.append(key)
                shard = key[0]
                most[shard] = max(most[shard], sum(k[0] == shard for k in in_flight))
                cond.notify_all()
            assert release.wait(JOIN_TIMEOUT)
            with cond:
                in_flight.remove(key)
                processed.append(key)
            queue.done(key)

    keys = [*(f"a{n}" for n in range(10)), "b0"]
    for key in keys:
        queue.add(key)
    workers = [start_thread(work) for _ in range(4)]
    with cond:
        assert cond.wait_for(lambda: len(in_flight) >= 3, JOIN_TIMEOUT)
    assert clock.wait_for_waiters(2), "the fourth worker is not waiting in get()"
    with cond:
        assert sorted(key[0] for key in in_flight) == ["a", "a", "b"]
    release.set()
    queue.shut_down_with_drain()
    for worker in workers:
        join(worker)
    assert most == {"a": 2, "b": 1}
    assert sorted(processed) == sorted(keys)


def test_dedupe_and_re_add_while_processing_with_shards(
    make_queue: MakeQueue, registry: CollectorRegistry
) -> None:
    """Adds collapse, a key added while processing comes back after done, depth counts all."""
    queue = sharded(make_queue, cap=1)
    for key in ("a1", "a1", "a2", "b1"):
        queue.add(key)
    assert len(queue) == 3
    assert queue.get() == "a1"
    queue.add("a1")
    queue.add("a1")
    assert len(queue) == 2  # a2 (capped) and b1
    assert sample(registry, "workqueue_depth") == 3
    assert queue.get() == "b1"
    queue.done("b1")
    queue.done("a1")
    assert drain(queue) == ["a2", "a1"]
    assert sample(registry, "workqueue_depth") == 0
    assert sample(registry, "workqueue_adds_total") == 4


def test_shut_down_still_hands_out_capped_keys_after_done(
    make_queue: MakeQueue, clock: FakeClock
) -> None:
    """After shut_down, queued keys still come out (capped ones after done), then None."""
    queue = sharded(make_queue, cap=1)
    for key in ("a1", "a2", "b1"):
        queue.add(key)
    assert queue.get() == "a1"
    queue.shut_down()
    assert queue.get() == "b1"
    queue.done("b1")
    got = get_blocks(queue, clock, waiters=1)  # the waiting loop has ended
    queue.done("a1")
    assert got() == "a2"
    queue.done("a2")
    assert queue.get() is None


def test_shut_down_with_drain_with_shards(make_queue: MakeQueue) -> None:
    """Drain waits for every processing key; a capped key still comes out after done.

    As in client-go, drain waits for keys being processed, not for queued ones.
    """
    queue = sharded(make_queue, cap=1)
    for key in ("a1", "a2", "b1"):
        queue.add(key)
    assert queue.get() == "a1"
    assert queue.get() == "b1"
    finished: list[str] = []
    seen_at_return: list[list[str]] = []

    def drain_and_record() -> None:
        queue.shut_down_with_drain()
        seen_at_return.append(list(finished))

    drainer = start_thread(drain_and_record)
    for key in ("b1", "a1"):
        finished.append(key)
        queue.done(key)
    join(drainer)
    assert seen_at_return == [["b1", "a1"]]
    assert queue.get() == "a2"
    queue.done("a2")
    assert queue.get() is None


def test_cap_below_one_is_refused(make_queue: MakeQueue) -> None:
    """A cap of 0 would never hand out a key: the constructor refuses it."""
    with pytest.raises(ValueError, match="at least 1"):
        sharded(make_queue, cap=0)
