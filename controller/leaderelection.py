"""Leader election on a ``coordination.k8s.io/v1`` Lease, after client-go's leaderelection.

``LeaderElector.run`` blocks: it tries to acquire the Lease every ``retry_period``
seconds; once it holds it, it calls ``on_started_leading`` and renews every
``retry_period``. If it cannot renew for ``renew_deadline`` seconds (or the stop event is
set) it stops leading: ``on_stopped_leading`` is always called once leading began, and
``run`` returns. On a clean stop it releases the Lease (holder cleared) so a standby takes
over at once instead of waiting ``lease_duration``.

Expiry is judged like client-go: from the local time at which this process last saw the
Lease record *change*, never from the timestamps in it, so clock skew between replicas
does not matter. Local times, waits and the timestamps written into the Lease all come
from the elector's ``Clock`` (``now()`` and ``wall()``).

A failed try (the API server away, an answer that does not decode, even a bug) never ends
the elector: the try counts as not acquired or not renewed, the failure is logged once per
streak (``controller.failures.FailureStreak``), and the next try comes a retry period
later, as client-go's does; only the renew deadline ends leading.

Like client-go, this gives no fencing: two processes can briefly both believe they lead
(the old leader until it notices, the new one after ``lease_duration``). Callers must stop
work the moment ``on_stopped_leading`` runs.

Defaults: a 60 s lease, a 40 s renew deadline and a 5 s retry period. They are longer
than controller-runtime's 15/10/2 because this operator's threads share two cores with
Pulumi updates; a busy process should not lose its lease and interrupt an update. A
standby takes over at most 60 s after the leader dies (at once after a clean stop).
"""

from __future__ import annotations

import dataclasses
import datetime
import random
import threading
from collections.abc import Callable
from typing import Any

import structlog
from kubernetes import client

from controller.clock import Clock, RealClock
from controller.failures import FailureStreak, describe

log = structlog.get_logger(__name__)


@dataclasses.dataclass(frozen=True)
class LeaderElectionConfig:
    """Where the Lease lives, who we are, and the timing (seconds)."""

    lease_name: str
    namespace: str
    identity: str
    lease_duration: float = 60.0
    renew_deadline: float = 40.0
    retry_period: float = 5.0
    field_manager: str | None = None
    """Who the Lease's ``managedFields`` say wrote it (None: the API server's default)."""

    def __post_init__(self) -> None:
        """Check client-go's constraints: lease > renew deadline > 1.2 x retry period."""
        if not self.lease_duration > self.renew_deadline:
            msg = "lease duration must be greater than the renew deadline"
            raise ValueError(msg)
        if not self.renew_deadline > 1.2 * self.retry_period:
            msg = "renew deadline must be greater than 1.2 x the retry period"
            raise ValueError(msg)
        if self.retry_period <= 0:
            msg = "retry period must be positive"
            raise ValueError(msg)


def _micro_time(now: datetime.datetime) -> datetime.datetime:
    # Lease times are MicroTime, parsed with exactly six fractional digits; the client
    # serialises with isoformat(), which drops the fraction when it is zero.
    return now.replace(microsecond=now.microsecond or 1)


class LeaderElector:
    """Acquires and renews one Lease; see the module docstring for the contract."""

    def __init__(
        self,
        config: LeaderElectionConfig,
        api_client: client.ApiClient,
        *,
        clock: Clock | None = None,
    ) -> None:
        """Prepare an elector timed by ``clock``; nothing happens until ``run``."""
        self.config = config
        self._api = client.CoordinationV1Api(api_client)
        self._clock = clock or RealClock()
        self._observed: tuple[Any, ...] | None = None  # last holder/renew record seen
        self._observed_at = 0.0
        self._leading = threading.Event()
        self._streak = FailureStreak("leader election", self._clock)

    @property
    def _lease_ref(self) -> str:
        return f"{self.config.namespace}/{self.config.lease_name}"

    def is_leader(self) -> bool:
        """True while this process holds the Lease."""
        return self._leading.is_set()

    def run(
        self,
        stop: threading.Event,
        on_started_leading: Callable[[], None],
        on_stopped_leading: Callable[[], None],
    ) -> None:
        """Acquire, lead, renew; returns when leadership is lost or ``stop`` is set."""
        if not self._acquire(stop):
            return
        self._leading.set()
        log.info("Acquired the lease", lease=self._lease_ref)
        try:
            on_started_leading()
            self._renew_until_lost(stop)
        finally:
            self._leading.clear()
            if stop.is_set():
                self._release()
            on_stopped_leading()

    def _acquire(self, stop: threading.Event) -> bool:
        while not stop.is_set():
            if self._try_acquire_or_renew():
                return True
            jittered = self.config.retry_period * (1 + random.random() * 0.2)  # noqa: S311
            self._clock.wait_event(stop, self._clock.now() + jittered)
        return False

    def _renew_until_lost(self, stop: threading.Event) -> None:
        last_renew = self._clock.now()
        while not self._clock.wait_event(stop, self._clock.now() + self.config.retry_period):
            if self._try_acquire_or_renew():
                last_renew = self._clock.now()
            elif self._clock.now() - last_renew > self.config.renew_deadline:
                log.error(
                    "Lost the lease",
                    lease=self._lease_ref,
                    no_renewal_for=self.config.renew_deadline,
                )
                return

    def _try_acquire_or_renew(self) -> bool:
        """One try: True if the Lease is ours now; False if not, or if the try failed."""
        try:
            mine = self._acquire_or_renew()
        except Exception as err:  # noqa: BLE001 - a failed try never ends the elector
            self._streak.failed(err, lease=self._lease_ref)
            return False
        self._streak.succeeded(lease=self._lease_ref)
        return mine

    def _acquire_or_renew(self) -> bool:
        """Read the Lease and take or renew it if we may; raises what a call raised."""
        now = self._clock.wall()
        try:
            lease = self._api.read_namespaced_lease(self.config.lease_name, self.config.namespace)
        except client.ApiException as err:
            if err.status != 404:
                raise
            return self._create(now)
        spec = lease.spec or client.V1LeaseSpec()
        self._observe(spec)
        holder = spec.holder_identity or ""
        mine = holder == self.config.identity
        expired = self._clock.now() > self._observed_at + (
            spec.lease_duration_seconds or self.config.lease_duration
        )
        if holder and not mine and not expired:
            return False
        if not mine:
            spec.acquire_time = _micro_time(now)
            spec.lease_transitions = (spec.lease_transitions or 0) + (1 if holder else 0)
        spec.holder_identity = self.config.identity
        spec.lease_duration_seconds = int(self.config.lease_duration)
        spec.renew_time = _micro_time(now)
        lease.spec = spec
        return self._replace(lease)

    def _create(self, now: datetime.datetime) -> bool:
        """Create the Lease held by us; False if another replica created it first (409)."""
        lease = client.V1Lease(
            metadata=client.V1ObjectMeta(
                name=self.config.lease_name, namespace=self.config.namespace
            ),
            spec=client.V1LeaseSpec(
                holder_identity=self.config.identity,
                lease_duration_seconds=int(self.config.lease_duration),
                acquire_time=_micro_time(now),
                renew_time=_micro_time(now),
                lease_transitions=0,
            ),
        )
        try:
            self._api.create_namespaced_lease(
                self.config.namespace, lease, field_manager=self.config.field_manager
            )
        except client.ApiException as err:
            if err.status != 409:
                raise
            log.info("Another replica created the lease first", lease=self._lease_ref)
            return False
        return True

    def _replace(self, lease: client.V1Lease) -> bool:
        """Write ``lease``; False if another replica wrote it since we read it (409)."""
        # The read's resourceVersion makes this a compare-and-swap: a 409 means another
        # replica wrote first, and this try fails.
        try:
            self._api.replace_namespaced_lease(
                self.config.lease_name,
                self.config.namespace,
                lease,
                field_manager=self.config.field_manager,
            )
        except client.ApiException as err:
            if err.status != 409:
                raise
            log.info("Another replica updated the lease first", lease=self._lease_ref)
            return False
        return True

    def _observe(self, spec: client.V1LeaseSpec) -> None:
        record = (spec.holder_identity, spec.renew_time, spec.lease_transitions)
        if record != self._observed:
            self._observed = record
            self._observed_at = self._clock.now()

    def _release(self) -> None:
        """Clear the holder so a standby can take over at once (client-go ReleaseOnCancel).

        Best effort: any failure is logged, never raised (leading still ends).
        """
        try:
            lease = self._api.read_namespaced_lease(self.config.lease_name, self.config.namespace)
            if lease.spec is None or lease.spec.holder_identity != self.config.identity:
                return
            lease.spec.holder_identity = None
            lease.spec.lease_duration_seconds = 1
            lease.spec.renew_time = _micro_time(self._clock.wall())
            if self._replace(lease):
                log.info("Released the lease", lease=self._lease_ref)
        except Exception as err:  # noqa: BLE001 - a standby then waits out the lease instead
            log.warning("Releasing the lease failed", lease=self._lease_ref, error=describe(err))
