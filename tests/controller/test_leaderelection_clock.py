"""Leader election on a FakeClock: retries, renewals, expiry and Lease times follow the clock.

The Lease API is a fake in memory. Each test steps the clock where a real elector would
wait; an elector that read the real time (or slept for real) would hang, then fail.
"""

from __future__ import annotations

import copy
import datetime
import threading
from collections.abc import Iterator

import pytest
from kubernetes import client

from controller.clock import FAKE_EPOCH, FakeClock
from controller.leaderelection import LeaderElectionConfig, LeaderElector

# Real seconds a background thread may take to react; only ever reached by a failing test.
JOIN_TIMEOUT = 5.0
# 60 s lease, 40 s deadline, 5 s retry
CONFIG = LeaderElectionConfig("lease", "ns", "me", field_manager="pulumi-stack-operator:shard=a")


class FakeLeases:
    """The Lease API of one namespace, in memory, with resourceVersion compare-and-swap."""

    def __init__(self) -> None:
        """No Lease yet; every call answers."""
        self.lease: client.V1Lease | None = None
        self.down = False
        self.writes = 0
        self.field_managers: list[str | None] = []  # of every create and replace

    def read_namespaced_lease(self, name: str, namespace: str) -> client.V1Lease:
        """A copy of the Lease; 404 if none, OSError while ``down``."""
        del name, namespace
        self._answer()
        if self.lease is None:
            raise client.ApiException(status=404, reason="Not Found")
        return copy.deepcopy(self.lease)

    def create_namespaced_lease(
        self, namespace: str, body: client.V1Lease, *, field_manager: str | None
    ) -> client.V1Lease:
        """Store ``body``; 409 if a Lease exists."""
        del namespace
        self._answer()
        self.field_managers.append(field_manager)
        if self.lease is not None:
            raise client.ApiException(status=409, reason="Conflict")
        return self._store(body)

    def replace_namespaced_lease(
        self, name: str, namespace: str, body: client.V1Lease, *, field_manager: str | None
    ) -> client.V1Lease:
        """Store ``body`` if its resourceVersion is the stored one; 409 otherwise."""
        del name, namespace
        self._answer()
        self.field_managers.append(field_manager)
        if _version(body) != (_version(self.lease) if self.lease else None):
            raise client.ApiException(status=409, reason="Conflict")
        return self._store(body)

    def hold(self, holder: str, duration: int = 60) -> None:
        """Make ``holder`` the Lease's holder, as another replica would."""
        spec = client.V1LeaseSpec(
            holder_identity=holder,
            lease_duration_seconds=duration,
            renew_time=datetime.datetime(2000, 1, 1, microsecond=1, tzinfo=datetime.UTC),
            lease_transitions=0,
        )
        metadata = client.V1ObjectMeta(name="lease", namespace="ns")
        self._store(client.V1Lease(metadata=metadata, spec=spec))

    def holder(self) -> str | None:
        """The holderIdentity now stored."""
        return self.spec().holder_identity

    def spec(self) -> client.V1LeaseSpec:
        """The stored Lease's spec (the test fails if there is none)."""
        assert self.lease is not None
        assert self.lease.spec is not None
        return self.lease.spec

    def _answer(self) -> None:
        if self.down:
            raise ConnectionRefusedError("the apiserver is down")

    def _store(self, body: client.V1Lease) -> client.V1Lease:
        self.writes += 1
        stored = copy.deepcopy(body)
        stored.metadata = stored.metadata or client.V1ObjectMeta()
        stored.metadata.resource_version = str(self.writes)
        self.lease = stored
        return copy.deepcopy(stored)


def _version(lease: client.V1Lease) -> str | None:
    return lease.metadata.resource_version if lease.metadata else None


class Run:
    """``elector.run`` in a thread, with events for its two callbacks."""

    def __init__(self, elector: LeaderElector) -> None:
        """Start electing."""
        self.stop = threading.Event()
        self.started, self.stopped = threading.Event(), threading.Event()
        self.thread = threading.Thread(
            target=elector.run, args=(self.stop, self.started.set, self.stopped.set), daemon=True
        )
        self.thread.start()

    def end(self) -> None:
        """Stop and join (the elector's waits end as soon as the stop is set)."""
        self.stop.set()
        self.thread.join(JOIN_TIMEOUT)
        assert not self.thread.is_alive()


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock at t=0 (wall: FAKE_EPOCH)."""
    return FakeClock()


@pytest.fixture
def leases() -> FakeLeases:
    """An empty fake Lease API."""
    return FakeLeases()


@pytest.fixture
def elector(clock: FakeClock, leases: FakeLeases) -> LeaderElector:
    """An elector for ``CONFIG`` on the fake clock and the fake Lease API."""
    elector = LeaderElector(CONFIG, client.ApiClient(), clock=clock)
    elector._api = leases  # type: ignore[assignment]  # noqa: SLF001 - the fake API
    return elector


@pytest.fixture
def run(elector: LeaderElector) -> Iterator[Run]:
    """The elector running; stopped afterwards."""
    running = Run(elector)
    yield running
    running.end()


def micro(seconds: float) -> datetime.datetime:
    """The Lease MicroTime the elector writes at fake time ``seconds``."""
    at = FAKE_EPOCH + datetime.timedelta(seconds=seconds)
    return at.replace(microsecond=at.microsecond or 1)


def test_a_new_lease_carries_the_clocks_wall_time(
    clock: FakeClock, leases: FakeLeases, run: Run
) -> None:
    """The acquireTime and renewTime written are the clock's wall time, not the machine's."""
    assert run.started.wait(JOIN_TIMEOUT)
    assert leases.spec().acquire_time == micro(0)
    assert leases.spec().renew_time == micro(0)
    assert clock.wait_for_waiters(1), "the leader should wait a retry period on the clock"


def test_the_leader_renews_every_retry_period_of_the_clock(
    clock: FakeClock, leases: FakeLeases, run: Run
) -> None:
    """No renewal before the retry period has passed on the clock; one right after."""
    assert run.started.wait(JOIN_TIMEOUT)
    assert clock.wait_for_waiters(1)
    clock.step(4.9)
    assert clock.wait_for_waiters(1)
    assert leases.writes == 1
    clock.step(0.1)
    assert clock.wait_for_waiters(1)
    assert leases.writes == 2
    assert leases.spec().renew_time == micro(5.0)
    assert leases.spec().acquire_time == micro(0)


def test_a_leader_that_cannot_renew_stops_after_the_renew_deadline_of_the_clock(
    clock: FakeClock, leases: FakeLeases, run: Run
) -> None:
    """With the apiserver down, leading ends once renew_deadline passes on the clock."""
    assert run.started.wait(JOIN_TIMEOUT)
    assert clock.wait_for_waiters(1)
    leases.down = True
    for _ in range(8):  # 40 s: the failures are not yet past the deadline
        clock.step(CONFIG.retry_period)
        assert clock.wait_for_waiters(1)
    assert not run.stopped.is_set()
    clock.step(CONFIG.retry_period)
    assert run.stopped.wait(JOIN_TIMEOUT)
    run.thread.join(JOIN_TIMEOUT)
    assert not run.thread.is_alive()


def test_another_holders_lease_is_taken_only_once_it_expired_on_our_clock(
    clock: FakeClock, leases: FakeLeases, elector: LeaderElector
) -> None:
    """Expiry counts from when we first saw the record, in our clock's time."""
    leases.hold("other", duration=60)
    run = Run(elector)
    try:
        assert clock.wait_for_waiters(1)
        while clock.now() < 60.0:  # retries up to 60 s: unchanged, but not yet expired
            clock.step(CONFIG.retry_period * 1.2)  # the longest jittered retry wait
            assert clock.wait_for_waiters(1)
            assert not run.started.is_set()
        clock.step(CONFIG.retry_period * 1.2)
        assert run.started.wait(JOIN_TIMEOUT)
        assert leases.holder() == "me"
        assert leases.spec().lease_transitions == 1
        assert leases.spec().acquire_time == micro(clock.now())
    finally:
        run.end()


def test_a_clean_stop_releases_the_lease_at_the_clocks_wall_time(
    clock: FakeClock, leases: FakeLeases, run: Run
) -> None:
    """Stopping (no step needed) clears the holder; renewTime is the clock's wall time."""
    assert run.started.wait(JOIN_TIMEOUT)
    assert clock.wait_for_waiters(1)
    clock.step(2.5)
    assert clock.wait_for_waiters(1)
    run.end()
    assert run.stopped.is_set()
    assert leases.holder() is None
    assert leases.spec().renew_time == micro(2.5)


def test_every_lease_write_carries_the_field_manager(
    clock: FakeClock, leases: FakeLeases, run: Run
) -> None:
    """The create, each renewal and the release are written as the configured manager."""
    assert run.started.wait(JOIN_TIMEOUT)
    assert clock.wait_for_waiters(1)
    clock.step(CONFIG.retry_period)
    assert clock.wait_for_waiters(1)
    run.end()
    assert len(leases.field_managers) == 3  # create, renew, release
    assert set(leases.field_managers) == {CONFIG.field_manager}
