"""A run pod's lease on its stack's lock: kept while its CLI lives, waited out by the next run.

A run pod may go on after the operator has lost sight of it (its node lost, the pod
force-deleted), and a run pod's hostname is its name, the Stack's: a lock of that
hostname in a ``file://`` backend cannot tell a dead run from a live one by its name.
The lock file's mtime says it (``locks.lease_lapsed``):

* ``LeaseKeeper`` (the agent, around its operation): every ``RENEW_SECONDS`` it sets the
  mtime of each lock of the stack that its own CLI holds (this host's name, a pid that
  runs pulumi in this pod) to now, and notes when it last managed to. The agent's fence
  (``pulumi_stack_operator.fence``) stops the CLI before ``locks.LEASE_SECONDS`` have
  passed without a renewal. Once the operation is over, ``release_spent`` deletes a lock
  its CLI left (killed), once nobody else has renewed it for two renewal periods.
* ``settle_own`` (the agent, before its operation and after a ``CONFLICT``): a lock of
  this host's name whose lease has lapsed is deleted; one whose lease runs is waited for,
  at most ``bound`` seconds, until it goes (its run ended) or lapses (its run is dead).

Other backends' locks are out of reach (``locks.stack_locks`` is None): there the
backend's own lock (a lock object in a bucket, Pulumi Cloud's update in progress)
refuses a second update, and nothing here releases it.
"""

from __future__ import annotations

import enum
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import structlog

from controller.clock import Clock
from workspace.runner.locks import (
    LockFile,
    StackLocks,
    delete,
    is_stale,
    lease_lapsed,
    lock_files_or_none,
)

log = structlog.get_logger(__name__)

RENEW_SECONDS = 5.0  # how often the agent renews its CLI's lock while it runs
QUIET_RENEWALS = 2  # renewal periods a spent lock must stay untouched before its own run deletes it


class LeaseKeeper:
    """Renews the locks this pod's CLI holds; knows when it last could (one per run)."""

    def __init__(self, locks: StackLocks, clock: Clock, *, renew: float = RENEW_SECONDS) -> None:
        """Keep the leases of the stack at ``locks``, renewing every ``renew`` seconds."""
        self.locks, self.clock, self.renew_every = locks, clock, renew
        self.renewed_at = clock.now()  # the last renewal pass that succeeded (clock time)
        self.written: dict[Path, int] = {}  # lock path -> its mtime (ns) once last renewed
        self._failing = False

    def lapsed(self) -> float:
        """Seconds since the last renewal pass that succeeded."""
        return self.clock.now() - self.renewed_at

    def renew(self) -> bool:
        """Set the mtime of every lock this pod's CLI holds to now; False when that failed.

        A lock this pod's CLI holds: this host's name and a pid that runs pulumi here. A
        lock that went meanwhile (its CLI released it) needs nothing. Any other failure
        (the backend unreadable or unwritable) leaves ``renewed_at`` where it was.
        """
        try:
            found = self.locks.files()
            stamp = _nanoseconds(self.clock)
            for lock in found:
                if held_here(lock):
                    self._touch(lock, stamp)
        except OSError as err:
            if not self._failing:
                log.warning("Cannot renew the run's lock lease", error=type(err).__name__)
            self._failing = True
            return False
        self._failing = False
        self.renewed_at = self.clock.now()
        return True

    @contextmanager
    def kept(self) -> Iterator[LeaseKeeper]:
        """Renew on a thread of its own until the block ends."""
        done = threading.Event()

        def loop() -> None:
            while not self.clock.wait_event(done, self.clock.now() + self.renew_every):
                self.renew()

        thread = threading.Thread(target=loop, name="lease", daemon=True)
        self.renew()
        thread.start()
        try:
            yield self
        finally:
            done.set()
            thread.join(timeout=self.renew_every * 2)

    def release_spent(self) -> int:
        """Delete the locks this run's CLI left behind, once it is over; how many it deleted.

        Call it once the operation has returned. A lock goes when its pid no longer runs
        pulumi here and its mtime is still the one this keeper gave it, after
        ``QUIET_RENEWALS`` renewal periods (waited on the clock) in which a live run of
        another pod of this hostname would have renewed it: so never a live run's. When
        the CLI left none (it released its lock), nothing is waited for.
        """
        if not self._spent():
            return 0
        self.clock.wait_event(
            threading.Event(), self.clock.now() + QUIET_RENEWALS * self.renew_every
        )
        spent = self._spent()
        if not spent or not _deleted(spent):
            return 0
        log.warning("Released the lock this run's stopped CLI left", locks=len(spent))
        return len(spent)

    def _spent(self) -> list[LockFile]:
        """The locks this keeper renewed last, whose pid no longer runs pulumi here."""
        if not self.written:
            return []
        found = lock_files_or_none(self.locks) or []
        return [
            lock
            for lock in found
            if self.written.get(lock.path) == _mtime_ns(lock) and is_stale(lock.info)
        ]

    def _touch(self, lock: LockFile, stamp: int) -> None:
        """Set the lock's mtime to ``stamp``; note the mtime the file system then keeps."""
        try:
            os.utime(lock.path, ns=(stamp, stamp))
            self.written[lock.path] = lock.path.stat().st_mtime_ns
        except FileNotFoundError:
            return  # released meanwhile


def held_here(lock: LockFile) -> bool:
    """Whether ``lock`` is held by a pulumi process of this host (this pod's CLI)."""
    info = lock.info
    if info.hostname != socket.gethostname() or info.pid is None or info.pid <= 0:
        return False
    return not is_stale(info)


class Settled(enum.Enum):
    """What ``settle_own`` found of the locks of this host's name."""

    FREE = "free"  # none (other hosts' locks are the CLI's to judge)
    RELEASED = "released"  # some, all lapsed: deleted
    HELD = "held"  # one still renewed when the wait ended
    STOPPED = "stopped"  # the run was stopped while waiting


@dataclass(frozen=True)
class Settlement:
    """``settle_own``'s answer, and the lock still held when it is ``HELD``."""

    state: Settled
    held: LockFile | None = None


def settle_own(
    locks: StackLocks, clock: Clock, stop: threading.Event, *, bound: float
) -> Settlement:
    """Wait until no lock of this host's name stands; delete those whose lease lapsed.

    Looks every ``RENEW_SECONDS`` for at most ``bound`` seconds: ``FREE`` when there is
    none (or another host's lock stands beside them: the CLI's conflict, not ours to
    judge; or the locks cannot be read: the CLI, which reads them too, takes no lock
    then), ``RELEASED`` when every one lapsed and was deleted, ``HELD`` (with the lock)
    when one was still renewed at the end, ``STOPPED`` when ``stop`` was set.
    """
    give_up, said = clock.now() + bound, False
    while True:
        found = lock_files_or_none(locks)
        if found is None:  # the CLI reads the same directory: its error will say why
            return Settlement(Settled.FREE)
        settled = _settle(found, clock)
        if settled is not None:
            return settled
        if not said:
            log.info("Waiting for the lock an earlier run pod of this Stack holds", bound=bound)
            said = True
        if clock.now() >= give_up:
            return Settlement(Settled.HELD, _live_own(found, clock))
        if clock.wait_event(stop, min(give_up, clock.now() + RENEW_SECONDS)):
            return Settlement(Settled.STOPPED)


def _settle(found: list[LockFile], clock: Clock) -> Settlement | None:
    """The settlement these locks allow now; None while one of this host's name is live."""
    host = socket.gethostname()
    own = [lock for lock in found if lock.info.hostname == host]
    if not own or len(own) < len(found):
        return Settlement(Settled.FREE)
    if _live_own(own, clock) is not None or not _deleted(own):
        return None
    log.warning("Released the lock an earlier run pod of this Stack left", locks=len(own))
    return Settlement(Settled.RELEASED)


def _deleted(locks: list[LockFile]) -> bool:
    """Delete ``locks``; False when the backend refused (they stand, as far as we know)."""
    try:
        delete(locks)
    except OSError as err:
        log.warning("Cannot delete the stack's lock", error=type(err).__name__)
        return False
    return True


def _live_own(found: list[LockFile], clock: Clock) -> LockFile | None:
    """The first lock of this host's name whose lease has not lapsed, if any."""
    host, now = socket.gethostname(), clock.wall()
    live = (x for x in found if x.info.hostname == host and not lease_lapsed(x, now))
    return next(live, None)


def _nanoseconds(clock: Clock) -> int:
    """The clock's wall time in nanoseconds since the epoch (an mtime)."""
    wall = clock.wall()
    return int(wall.timestamp()) * 1_000_000_000 + wall.microsecond * 1_000


def _mtime_ns(lock: LockFile) -> int | None:
    try:
        return lock.path.stat().st_mtime_ns
    except OSError:
        return None
