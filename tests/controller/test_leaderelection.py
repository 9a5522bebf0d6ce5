"""Leader election on a real Lease: acquire, exclude, lose, release."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterator

import pytest
from kubernetes import client

from controller.leaderelection import LeaderElectionConfig, LeaderElector
from testbed.control_plane import ControlPlane

pytestmark = pytest.mark.integration

FAST = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.2}
PATIENT = {"lease_duration": 30.0, "renew_deadline": 20.0, "retry_period": 0.2}
"""Renewals that survive a loaded machine; a takeover within seconds is then a release."""


class Run:
    """A LeaderElector running in a thread, with events for its callbacks."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        identity: str,
        timings: dict[str, float] = FAST,
    ) -> None:
        """Start electing."""
        cfg = LeaderElectionConfig(
            "lease",
            namespace,
            identity,
            lease_duration=timings["lease_duration"],
            renew_deadline=timings["renew_deadline"],
            retry_period=timings["retry_period"],
        )
        self.elector = LeaderElector(cfg, api)
        self.stop = threading.Event()
        self.started, self.stopped = threading.Event(), threading.Event()
        self.thread = threading.Thread(
            target=self.elector.run, args=(self.stop, self.started.set, self.stopped.set)
        )
        self.thread.start()

    def end(self) -> None:
        """Stop and join."""
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive()


@pytest.fixture
def api(control_plane: ControlPlane) -> Iterator[client.ApiClient]:
    """An admin client."""
    with control_plane.api_client() as api_client:
        yield api_client


def holder(api: client.ApiClient, namespace: str) -> str | None:
    """The Lease's holderIdentity."""
    lease = client.CoordinationV1Api(api).read_namespaced_lease("lease", namespace)
    return lease.spec.holder_identity if lease.spec else None


def test_one_leads_the_other_waits_and_takes_over_on_release(
    api: client.ApiClient, namespace: str
) -> None:
    """The first elector leads; the second only after the first stops and releases."""
    first = Run(api, namespace, "first", PATIENT)
    assert first.started.wait(10)
    second = Run(api, namespace, "second", PATIENT)
    try:
        assert not second.started.wait(1.5)
        assert holder(api, namespace) == "first"
        first.end()
        assert first.stopped.is_set()
        assert second.started.wait(15)  # well before the 30 s lease would have expired
        assert holder(api, namespace) == "second"
    finally:
        first.end()
        second.end()
    assert holder(api, namespace) is None


def test_a_leader_whose_lease_is_taken_stops_leading(api: client.ApiClient, namespace: str) -> None:
    """If another holder takes the Lease, renewals fail and on_stopped_leading runs."""
    run = Run(api, namespace, "victim")
    try:
        assert run.started.wait(10)
        coordination = client.CoordinationV1Api(api)
        lease = coordination.read_namespaced_lease("lease", namespace)
        assert lease.spec is not None
        lease.spec.holder_identity = "usurper"
        lease.spec.lease_duration_seconds = 3600
        lease.spec.renew_time = datetime.datetime.now(datetime.UTC).replace(microsecond=1)
        coordination.replace_namespaced_lease("lease", namespace, lease)
        assert run.stopped.wait(10)
        assert not run.elector.is_leader()
        run.thread.join(5)
        assert not run.thread.is_alive()
    finally:
        run.end()
    assert holder(api, namespace) == "usurper"  # never break someone else's lease


def test_lease_timings_are_validated() -> None:
    """client-go's ordering of the three durations is enforced."""
    with pytest.raises(ValueError, match="renew deadline"):
        LeaderElectionConfig("l", "ns", "me", lease_duration=10, renew_deadline=5, retry_period=5)
    with pytest.raises(ValueError, match="lease duration"):
        LeaderElectionConfig("l", "ns", "me", lease_duration=5, renew_deadline=5, retry_period=1)
