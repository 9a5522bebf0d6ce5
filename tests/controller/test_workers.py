"""process_next_work_item turns each reconcile outcome into the right queue action.

The controller runs on a FakeClock: the queue's delays, the reconcile durations and the
deadlines of ``shut_down`` move only when a test steps it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs
from urllib3.exceptions import ProtocolError

from controller import retry
from controller.cache import ObjectKey
from controller.clock import FakeClock
from controller.reconciler import Result, TerminalError, TransientError
from controller.workers import Controller, by_namespace
from testbed.waits import wait_for

# Real seconds a background thread may take to react; only ever reached by a failing test.
JOIN_TIMEOUT = 5.0
POLL = 0.01  # real seconds between looks at a worker thread's progress

KEY = ObjectKey("ns", "stack")
Behaviour = Callable[[ObjectKey, threading.Event], Result]


class ScriptedReconciler:
    """Runs the next scripted behaviour on each call and records the keys."""

    def __init__(self) -> None:
        """Start with nothing scripted (a call then fails the test)."""
        self.script: list[Behaviour] = []
        self.calls: list[ObjectKey] = []

    def reconcile(self, key: ObjectKey, stop: threading.Event) -> Result:
        """Pop and run the next behaviour."""
        self.calls.append(key)
        assert self.script, "reconcile called more often than scripted"
        return self.script.pop(0)(key, stop)


def returns(result: Result) -> Behaviour:
    """A behaviour returning ``result``."""
    return lambda _key, _stop: result


def raises(error: Exception) -> Behaviour:
    """A behaviour raising ``error``."""

    def behave(_key: ObjectKey, _stop: threading.Event) -> Result:
        raise error

    return behave


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock at t=0."""
    return FakeClock()


@pytest.fixture
def registry() -> CollectorRegistry:
    """A fresh registry."""
    return CollectorRegistry()


@pytest.fixture
def reconciler() -> ScriptedReconciler:
    """A reconciler with an empty script."""
    return ScriptedReconciler()


@pytest.fixture
def controller(
    reconciler: ScriptedReconciler, registry: CollectorRegistry, clock: FakeClock
) -> Iterator[Controller]:
    """A controller over the scripted reconciler, its queue shut down afterwards."""
    ctl = Controller("stacks", reconciler, registry, clock=clock)
    yield ctl
    ctl.queue.shut_down()


def total(registry: CollectorRegistry, result: str) -> float | None:
    """controller_runtime_reconcile_total for one result."""
    labels = {"controller": "stacks", "result": result}
    return registry.get_sample_value("controller_runtime_reconcile_total", labels)


def step(clock: FakeClock, seconds: float) -> None:
    """Advance the clock and wait for the queue's delay loop to block again."""
    clock.step(seconds)
    assert clock.wait_for_waiters(1)


def test_success_forgets_the_key(
    controller: Controller,
    reconciler: ScriptedReconciler,
    registry: CollectorRegistry,
    clock: FakeClock,
) -> None:
    """A plain Result() resets backoff and does not requeue."""
    reconciler.script = [raises(TransientError("flaky")), returns(Result())]
    controller.queue.add(KEY)
    assert controller.process_next_work_item()
    assert controller.queue.num_requeues(KEY) == 1
    step(clock, 0.005)  # the first retry is due 5 ms later
    assert controller.process_next_work_item()
    assert controller.queue.num_requeues(KEY) == 0
    assert len(controller.queue) == 0
    assert total(registry, "success") == 1
    assert total(registry, "error") == 1


def test_all_result_series_exist_before_any_reconcile(registry: CollectorRegistry) -> None:
    """Every result label is exported at 0 from the start."""
    Controller("stacks", ScriptedReconciler(), registry)
    for result in ("success", "error", "requeue", "requeue_after"):
        assert total(registry, result) == 0


def test_requeue_after_comes_back_after_the_delay(
    controller: Controller, reconciler: ScriptedReconciler, clock: FakeClock
) -> None:
    """requeue_after=30 makes the key ready 30 s later, not before."""
    reconciler.script = [returns(Result(requeue_after=30))]
    controller.queue.add(KEY)
    controller.process_next_work_item()
    step(clock, 29)
    assert len(controller.queue) == 0
    step(clock, 1)
    assert len(controller.queue) == 1


def test_transient_errors_back_off_exponentially_up_to_the_cap(
    controller: Controller, reconciler: ScriptedReconciler, clock: FakeClock
) -> None:
    """Each failure doubles the delay; max_backoff caps it for that key."""
    reconciler.script = [raises(TransientError("down", max_backoff=0.04))] * 6
    controller.queue.add(KEY)
    expected = [0.005, 0.01, 0.02, 0.04, 0.04]
    for delay in expected:
        controller.process_next_work_item()
        step(clock, delay * 0.9)
        assert len(controller.queue) == 0, f"ready before {delay}s"
        step(clock, delay * 0.1 + 1e-9)
        assert len(controller.queue) == 1, f"not ready after {delay}s"
    assert controller.queue.num_requeues(KEY) == len(expected)


def test_terminal_error_is_not_retried(
    controller: Controller,
    reconciler: ScriptedReconciler,
    clock: FakeClock,
    registry: CollectorRegistry,
) -> None:
    """A TerminalError forgets the key and never requeues it."""
    reconciler.script = [raises(TerminalError("bad spec"))]
    controller.queue.add(KEY)
    controller.process_next_work_item()
    step(clock, 2000)
    assert len(controller.queue) == 0
    assert controller.queue.num_requeues(KEY) == 0
    labels = {"controller": "stacks"}
    assert (
        registry.get_sample_value("controller_runtime_terminal_reconcile_errors_total", labels) == 1
    )


def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition`` (a worker thread's progress) until true; fail after 5 real seconds."""
    wait_for(condition, what, JOIN_TIMEOUT, interval=POLL)


def test_the_reconcile_time_is_measured_on_the_clock(
    controller: Controller,
    reconciler: ScriptedReconciler,
    registry: CollectorRegistry,
    clock: FakeClock,
) -> None:
    """controller_runtime_reconcile_time_seconds observes the clock's time, not the wall's."""

    def slow(_key: ObjectKey, _stop: threading.Event) -> Result:
        clock.step(42.0)
        return Result()

    reconciler.script = [slow]
    controller.queue.add(KEY)
    assert controller.process_next_work_item()
    labels = {"controller": "stacks"}
    family = "controller_runtime_reconcile_time_seconds"
    assert registry.get_sample_value(f"{family}_sum", labels) == 42
    assert registry.get_sample_value(f"{family}_bucket", {**labels, "le": "30.0"}) == 0


def test_unexpected_exception_keeps_the_worker_alive_and_retries(
    controller: Controller,
    reconciler: ScriptedReconciler,
    clock: FakeClock,
    registry: CollectorRegistry,
) -> None:
    """A bug in reconcile is counted as a panic and retried; the worker thread survives."""
    reconciler.script = [raises(RuntimeError("bug")), returns(Result())]
    controller.run()
    controller.queue.add(KEY)
    wait_until(lambda: controller.queue.num_requeues(KEY) == 1, "the failure's requeue")
    step(clock, 0.005)
    wait_until(lambda: total(registry, "success") == 1, "the retry's success")
    assert reconciler.calls == [KEY, KEY]
    assert controller.alive()
    labels = {"controller": "stacks"}
    assert registry.get_sample_value("controller_runtime_reconcile_panics_total", labels) == 1


def shut_down_in_thread(
    controller: Controller, deadline: float, interrupt_timeout: float
) -> tuple[threading.Thread, list[bool]]:
    """Call ``controller.shut_down`` in a thread; its answer lands in the list."""
    answers: list[bool] = []
    thread = threading.Thread(
        target=lambda: answers.append(controller.shut_down(deadline, interrupt_timeout)),
        daemon=True,
    )
    thread.start()
    return thread, answers


def interrupt_after_the_drain_deadline(clock: FakeClock, deadline: float) -> None:
    """Step past a running ``shut_down``'s drain deadline; return once only its join waits.

    The drain thread ends when it is abandoned; until then it may still count as a waiter.
    """
    assert clock.wait_for_waiters(2), "the drain and shut_down should wait on the clock"
    clock.step(deadline)
    wait_until(
        lambda: not any(t.name == "stacks-drain" for t in threading.enumerate()),
        "the abandoned drain to end",
    )
    assert clock.wait_for_waiters(1), "shut_down should wait for the reconcile on the clock"


def test_shut_down_waits_for_running_reconciles_then_interrupts(
    controller: Controller, reconciler: ScriptedReconciler, clock: FakeClock
) -> None:
    """A reconcile that outlives the deadline (of the clock) sees stop, then returns."""
    started, seen_stop = threading.Event(), threading.Event()

    def slow(_key: ObjectKey, stop: threading.Event) -> Result:
        started.set()
        if stop.wait(JOIN_TIMEOUT):
            seen_stop.set()
        return Result()

    reconciler.script = [slow]
    controller.run()
    controller.queue.add(KEY)
    assert started.wait(JOIN_TIMEOUT)
    thread, answers = shut_down_in_thread(controller, deadline=600, interrupt_timeout=600)
    assert clock.wait_for_waiters(2), "the drain and shut_down should wait on the clock"
    clock.step(599)
    assert clock.wait_for_waiters(2)
    assert not seen_stop.is_set()
    clock.step(1)
    thread.join(JOIN_TIMEOUT)
    assert answers == [False]
    assert seen_stop.is_set()
    assert not controller.alive()


def test_a_key_changed_while_processing_is_not_reconciled_again_once_shutting_down(
    controller: Controller, reconciler: ScriptedReconciler, clock: FakeClock
) -> None:
    """``done`` re-queues a key that changed meanwhile; after shutdown no worker takes it."""
    started, release = threading.Event(), threading.Event()

    def held(_key: ObjectKey, _stop: threading.Event) -> Result:
        started.set()
        assert release.wait(30)
        return Result()

    reconciler.script = [held, returns(Result())]
    controller.run()
    controller.queue.add(KEY)
    assert started.wait(JOIN_TIMEOUT)
    controller.queue.add(KEY)  # changed while being processed: done() queues it again
    thread, answers = shut_down_in_thread(controller, deadline=30, interrupt_timeout=30)
    assert clock.wait_for_waiters(2), "shut_down should be draining"
    release.set()

    thread.join(JOIN_TIMEOUT)
    assert answers == [True]
    assert clock.now() == 0.0
    assert reconciler.calls == [KEY]
    assert not controller.alive()


def test_interrupted_reconciles_get_the_interrupt_timeout_to_return(
    controller: Controller, reconciler: ScriptedReconciler, clock: FakeClock
) -> None:
    """Past the deadline the reconcile is interrupted, and shut_down waits for it to return.

    Its outcome is then reported before the caller closes its writers (a slow ``pulumi``
    may take most of its interrupt grace to stop).
    """
    interrupted, wound_down, returned = threading.Event(), threading.Event(), threading.Event()

    def slow_to_stop(_key: ObjectKey, stop: threading.Event) -> Result:
        assert stop.wait(JOIN_TIMEOUT)
        interrupted.set()
        assert wound_down.wait(JOIN_TIMEOUT)  # winding down after the interrupt
        returned.set()
        return Result()

    reconciler.script = [slow_to_stop]
    controller.run()
    controller.queue.add(KEY)
    wait_until(lambda: len(reconciler.calls) == 1, "the reconcile to start")
    thread, answers = shut_down_in_thread(controller, deadline=1, interrupt_timeout=600)
    interrupt_after_the_drain_deadline(clock, 1)
    assert interrupted.wait(JOIN_TIMEOUT)
    clock.step(599)
    assert clock.wait_for_waiters(1), "599 s is within the interrupt timeout"
    assert thread.is_alive()
    wound_down.set()

    thread.join(JOIN_TIMEOUT)
    assert answers == [False]
    assert returned.is_set()
    assert not controller.alive()


def test_shut_down_gives_up_on_a_reconcile_that_ignores_the_interrupt(
    controller: Controller, reconciler: ScriptedReconciler, clock: FakeClock
) -> None:
    """Once the interrupt timeout has passed on the clock, shut_down returns without it."""
    release = threading.Event()

    def deaf(_key: ObjectKey, _stop: threading.Event) -> Result:
        assert release.wait(JOIN_TIMEOUT)
        return Result()

    reconciler.script = [deaf]
    controller.run()
    controller.queue.add(KEY)
    wait_until(lambda: len(reconciler.calls) == 1, "the reconcile to start")
    thread, answers = shut_down_in_thread(controller, deadline=1, interrupt_timeout=600)
    try:
        interrupt_after_the_drain_deadline(clock, 1)
        with capture_logs() as logs:
            clock.step(600)
            thread.join(JOIN_TIMEOUT)
        assert answers == [False]
        assert controller.alive(), "the deaf reconcile still runs: given up on, not killed"
        assert [line["event"] for line in logs] == ["Interrupted reconciles did not return"]
    finally:
        release.set()


def test_deletes_enqueue_the_key_even_when_found_by_a_relist(controller: Controller) -> None:
    """Both kinds of delete notification enqueue the object's key."""
    from controller.informer import DeletedFinalStateUnknown  # noqa: PLC0415

    obj = {"metadata": {"namespace": "ns", "name": "stack"}}
    controller.on_delete(DeletedFinalStateUnknown(KEY, obj))
    assert controller.queue.get() == KEY
    controller.queue.done(KEY)
    controller.on_delete(obj)
    assert len(controller.queue) == 1


# -- transient API failures are errors, not panics ----------------------------------------


def counter(registry: CollectorRegistry, name: str) -> float | None:
    """A per-controller counter of the "stacks" controller."""
    return registry.get_sample_value(name, {"controller": "stacks"})


@pytest.fixture
def reachable() -> Iterator[None]:
    """Forget the apiserver outages the test's errors record (401/403 read them later)."""
    yield
    reachability = getattr(retry, "REACHABILITY", None)
    if reachability is not None:
        reachability.forget()


@pytest.mark.usefixtures("reachable")
@pytest.mark.parametrize(
    "error",
    [
        pytest.param(client.ApiException(status=503, reason="Service Unavailable"), id="503"),
        pytest.param(client.ApiException(status=429, reason="Too Many Requests"), id="429"),
        pytest.param(ProtocolError("Connection aborted."), id="connection-aborted"),
        pytest.param(ConnectionRefusedError("refused"), id="connection-refused"),
    ],
)
def test_a_transient_api_error_is_an_error_not_a_panic(
    controller: Controller,
    reconciler: ScriptedReconciler,
    registry: CollectorRegistry,
    clock: FakeClock,
    error: Exception,
) -> None:
    """Counted as an error, logged without a traceback, requeued with the key's backoff."""
    reconciler.script = [raises(error), returns(Result())]
    controller.queue.add(KEY)
    with capture_logs() as logs:
        assert controller.process_next_work_item()
    assert counter(registry, "controller_runtime_reconcile_panics_total") == 0
    assert counter(registry, "controller_runtime_reconcile_errors_total") == 1
    assert total(registry, "error") == 1
    [entry] = logs
    assert entry["log_level"] == "info"
    assert "exc_info" not in entry
    assert type(error).__name__ in entry["error"]
    assert controller.queue.num_requeues(KEY) == 1
    step(clock, 0.005)  # the first retry is due 5 ms later
    assert controller.process_next_work_item()
    assert total(registry, "success") == 1


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(RuntimeError("bug"), id="bug"),
        pytest.param(client.ApiException(status=404, reason="Not Found"), id="404"),
    ],
)
def test_anything_else_is_a_panic_logged_with_its_traceback(
    controller: Controller,
    reconciler: ScriptedReconciler,
    registry: CollectorRegistry,
    error: Exception,
) -> None:
    """Not transient: a bug. Counted as a panic and logged with the exception."""
    reconciler.script = [raises(error)]
    controller.queue.add(KEY)
    with capture_logs() as logs:
        assert controller.process_next_work_item()
    assert counter(registry, "controller_runtime_reconcile_panics_total") == 1
    assert counter(registry, "controller_runtime_reconcile_errors_total") == 0
    [entry] = logs
    assert entry["log_level"] == "error"
    assert entry["exc_info"] is error
    assert controller.queue.num_requeues(KEY) == 1


# -- fairness between namespaces ------------------------------------------------------------


class NamespaceReconciler:
    """Keys of namespace "a" block until released; any other key returns at once.

    Records, under ``cond``, the keys running and finished, and the most "a" keys seen
    running at once.
    """

    def __init__(self) -> None:
        """Nothing running, nothing released."""
        self.cond = threading.Condition()
        self.release = threading.Event()
        self.running: set[ObjectKey] = set()
        self.most_a = 0
        self.finished: list[ObjectKey] = []

    def reconcile(self, key: ObjectKey, stop: threading.Event) -> Result:
        """Run ``key``: an "a" key until released (or stopped), another one at once."""
        with self.cond:
            self.running.add(key)
            self.most_a = max(self.most_a, sum(k.namespace == "a" for k in self.running))
            self.cond.notify_all()
        if key.namespace == "a":
            assert self.release.wait(30) or stop.is_set()
        with self.cond:
            self.running.discard(key)
            self.finished.append(key)
            self.cond.notify_all()
        return Result()

    def wait_for(self, predicate: Callable[[], bool]) -> None:
        """Block until ``predicate`` (read under ``cond``) holds; fail after 5 s."""
        with self.cond:
            assert self.cond.wait_for(predicate, timeout=5), "condition never held"


def test_another_namespace_is_served_while_one_namespace_holds_its_cap(
    registry: CollectorRegistry,
) -> None:
    """Two workers, cap 1: b's Stack runs while a's three slow ones wait their turn."""
    reconciler = NamespaceReconciler()
    ctl = Controller(
        "stacks",
        reconciler,
        registry,
        workers=2,
        shard=by_namespace,
        max_in_flight_per_shard=1,
    )
    slow = [ObjectKey("a", f"slow-{n}") for n in range(3)]
    new = ObjectKey("b", "new")
    try:
        for key in [*slow, new]:
            ctl.queue.add(key)
        ctl.run()
        reconciler.wait_for(lambda: new in reconciler.finished)
        reconciler.wait_for(lambda: slow[0] in reconciler.running)
        assert reconciler.finished == [new]  # a's Stacks are all still running or queued
        reconciler.release.set()
        reconciler.wait_for(lambda: len(reconciler.finished) == 4)
        assert reconciler.finished == [new, *slow]
        assert reconciler.most_a == 1
    finally:
        reconciler.release.set()
        assert ctl.shut_down(deadline=5)


def test_release_stops_only_that_keys_reconcile_as_an_interrupt_would(
    registry: CollectorRegistry,
) -> None:
    """``release(key)``: that key's stop event is set; the other running one goes on.

    Its object is no longer the controller's (it left the label selection): the reconcile
    returns soon, as on shutdown, while the workers keep taking work.
    """
    leaving, staying = ObjectKey("a", "leaving"), ObjectKey("b", "staying")
    started = {key: threading.Event() for key in (leaving, staying)}
    returned = {key: threading.Event() for key in (leaving, staying)}
    stops: dict[ObjectKey, threading.Event] = {}
    done = threading.Event()

    class Holding:
        def reconcile(self, key: ObjectKey, stop: threading.Event) -> Result:
            stops[key] = stop
            started[key].set()
            wait_for(lambda: stop.is_set() or done.is_set(), "stop or the end", JOIN_TIMEOUT, POLL)
            returned[key].set()
            return Result()

    ctl = Controller("stacks", Holding(), registry, workers=2)
    try:
        ctl.run()
        ctl.queue.add(leaving)
        ctl.queue.add(staying)
        assert all(event.wait(JOIN_TIMEOUT) for event in started.values())
        assert ctl.release(leaving) is True
        assert returned[leaving].wait(JOIN_TIMEOUT)
        assert stops[leaving].is_set()
        assert not stops[staying].is_set()
        assert not returned[staying].is_set()
        wait_for(lambda: not ctl.release(leaving), "the released reconcile to end", 5, POLL)
        assert ctl.alive()
        assert ctl.release(ObjectKey("c", "never")) is False  # nothing runs for it
    finally:
        done.set()
        assert ctl.shut_down(deadline=5)


def test_interrupt_stops_every_running_reconcile_and_those_starting_after(
    controller: Controller, reconciler: ScriptedReconciler
) -> None:
    """Each reconcile has its own stop event; ``interrupt`` sets them all."""
    started, seen = threading.Event(), threading.Event()

    def waits(_key: ObjectKey, stop: threading.Event) -> Result:
        started.set()
        if stop.wait(JOIN_TIMEOUT):
            seen.set()
        return Result()

    reconciler.script = [waits]
    controller.run()
    controller.queue.add(KEY)
    assert started.wait(JOIN_TIMEOUT)
    controller.interrupt()
    assert seen.wait(JOIN_TIMEOUT)
