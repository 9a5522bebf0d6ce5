"""A run pod's lease on its stack's lock: renewed while its CLI lives, waited out by the next run.

Lock files are written by hand in a temporary lock directory, with the mtimes a renewal
would give; time is a ``FakeClock`` (its wall clock is what mtimes are compared with).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from controller.clock import DEFAULT_WAITER_TIMEOUT, FakeClock
from testbed.waits import wait_for
from workspace.runner.lease import (
    QUIET_RENEWALS,
    RENEW_SECONDS,
    LeaseKeeper,
    Settled,
    Settlement,
    settle_own,
)
from workspace.runner.locks import LEASE_MARGIN, LEASE_SECONDS, LockFile, StackLocks, lease_lapsed
from workspace.runner.types import LockInfo

HOST = socket.gethostname()
LAPSE = LEASE_SECONDS + LEASE_MARGIN
WAITER_POLL = 0.05  # real seconds between two looks at whether a thread ended


@pytest.fixture
def clock() -> FakeClock:
    """Fake time; its wall clock is where mtimes are read against."""
    return FakeClock(start=1000.0)


@pytest.fixture
def locks(tmp_path: Path) -> StackLocks:
    """The stack's lock directories (the first one is where locks are written)."""
    return StackLocks((tmp_path / "locks" / "organization" / "files" / "dev", tmp_path / "dev"))


@pytest.fixture
def pulumi_process() -> Iterator[int]:
    """A live process whose argv[0] is ``pulumi``, as a CLI holding a lock is."""
    child = subprocess.Popen(["bash", "-c", "exec -a pulumi sleep 600"])
    cmdline = Path(f"/proc/{child.pid}/cmdline")
    try:
        wait_for(lambda: cmdline.read_bytes().startswith(b"pulumi\0"), "the exec", 10, 0.01)
        yield child.pid
    finally:
        child.kill()
        child.wait()


def dead_pid() -> int:
    """The pid of a process that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def write_lock(
    locks: StackLocks, clock: FakeClock, *, age: float, pid: int, host: str = HOST
) -> Path:
    """A lock file as the file backend writes it, last renewed ``age`` seconds ago."""
    directory = locks.dirs[0]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{uuid.uuid4()}.json"
    content = {"pid": pid, "username": "u", "hostname": host, "timestamp": "2026-01-01T00:00:00Z"}
    path.write_text(json.dumps(content))
    set_age(path, clock, age)
    return path


def set_age(path: Path, clock: FakeClock, age: float) -> None:
    """Give ``path`` the mtime of ``age`` seconds before the clock's wall time."""
    stamp = (clock.wall() - timedelta(seconds=age)).timestamp()
    os.utime(path, (stamp, stamp))


def waiting(clock: FakeClock, thread: threading.Thread) -> bool:
    """True once ``thread`` waits on ``clock``; False once it has ended instead.

    After a step the thread either waits again or finishes: waiting for a waiter alone
    would wait in vain for one that finished (and fail), however long it took to finish.
    """
    deadline = time.monotonic() + DEFAULT_WAITER_TIMEOUT
    while thread.is_alive():
        if clock.wait_for_waiters(timeout=WAITER_POLL):
            return True
        assert time.monotonic() < deadline, "the thread neither waits on the clock nor ends"
    return False


def in_thread(work: Callable[[], Settlement]) -> tuple[threading.Thread, list[Settlement]]:
    """Run ``work`` on a thread; its result lands in the list."""
    result: list[Settlement] = []
    thread = threading.Thread(target=lambda: result.append(work()), daemon=True)
    thread.start()
    return thread, result


# -- the rule ------------------------------------------------------------------------------


def test_a_lock_lapses_only_past_the_lease_and_its_margin(clock: FakeClock, tmp_path: Path) -> None:
    """Unrenewed for LEASE_SECONDS + LEASE_MARGIN: lapsed; a moment less, or no mtime: not."""
    now = clock.wall()

    info = LockInfo(pid=1, hostname=HOST)

    def renewed(seconds_ago: float) -> LockFile:
        return LockFile(tmp_path / "x.json", info, now - timedelta(seconds=seconds_ago))

    assert lease_lapsed(renewed(LAPSE + 1), now)
    assert not lease_lapsed(renewed(LAPSE - 1), now)
    assert not lease_lapsed(LockFile(tmp_path / "x.json", info, None), now)


def test_listing_locks_fails_loudly_but_a_missing_directory_holds_none(
    locks: StackLocks,
) -> None:
    """No lock directory: no lock. A lock directory that cannot be listed: OSError."""
    assert locks.files() == []
    locks.dirs[1].write_text("not a directory")
    with pytest.raises(NotADirectoryError):
        locks.files()


def test_the_mtime_is_read_as_the_renewal(locks: StackLocks, clock: FakeClock) -> None:
    """``files()`` gives each lock's mtime as when it was last renewed."""
    write_lock(locks, clock, age=12, pid=1)
    (lock,) = locks.files()
    assert lock.renewed is not None
    assert abs((clock.wall() - lock.renewed).total_seconds() - 12) < 0.01


# -- the keeper ---------------------------------------------------------------------------


def test_the_keeper_renews_only_the_locks_its_own_cli_holds(
    locks: StackLocks, clock: FakeClock, pulumi_process: int
) -> None:
    """This host's name and a live pulumi pid: renewed to now; any other lock: untouched."""
    own = write_lock(locks, clock, age=30, pid=pulumi_process)
    foreign = write_lock(locks, clock, age=30, pid=pulumi_process, host="elsewhere")
    dead = write_lock(locks, clock, age=30, pid=dead_pid())
    not_pulumi = write_lock(locks, clock, age=30, pid=os.getpid())
    keeper = LeaseKeeper(locks, clock)

    assert keeper.renew()

    ages = {path: age_of(path, clock) for path in (own, foreign, dead, not_pulumi)}
    assert ages[own] < 0.01
    assert all(abs(ages[p] - 30) < 0.01 for p in (foreign, dead, not_pulumi)), ages
    assert set(keeper.written) == {own}


def age_of(path: Path, clock: FakeClock) -> float:
    """Seconds since ``path``'s mtime, on the clock's wall time."""
    return clock.wall().timestamp() - path.stat().st_mtime


def test_a_failing_renewal_lets_the_lapse_grow(locks: StackLocks, clock: FakeClock) -> None:
    """The backend unreadable: ``renew`` is False and ``lapsed`` counts from the last success."""
    keeper = LeaseKeeper(locks, clock)
    assert keeper.renew()
    clock.step(7)
    locks.dirs[1].write_text("not a directory")
    assert not keeper.renew()
    clock.step(20)
    assert keeper.lapsed() == pytest.approx(27)
    locks.dirs[1].unlink()
    assert keeper.renew()
    assert keeper.lapsed() == 0


def test_a_lock_released_meanwhile_is_no_failure(
    locks: StackLocks, clock: FakeClock, pulumi_process: int
) -> None:
    """The CLI released its lock between the listing and the renewal: nothing failed."""
    path = write_lock(locks, clock, age=3, pid=pulumi_process)
    keeper = LeaseKeeper(locks, clock)
    (found,) = locks.files()
    path.unlink()
    keeper._touch(found, 1)  # noqa: SLF001 - the race, made to happen
    assert keeper.written == {}
    assert keeper.renew()


def test_the_keeper_renews_on_its_thread_while_the_block_runs(
    locks: StackLocks, clock: FakeClock, pulumi_process: int
) -> None:
    """``kept()`` renews every RENEW_SECONDS on the clock; none after the block."""
    path = write_lock(locks, clock, age=0, pid=pulumi_process)
    keeper = LeaseKeeper(locks, clock)
    with keeper.kept():
        for _ in range(3):
            assert clock.wait_for_waiters()
            clock.step(RENEW_SECONDS)
        assert clock.wait_for_waiters()
        assert age_of(path, clock) < 0.01
    clock.step(RENEW_SECONDS * 3)
    assert age_of(path, clock) == pytest.approx(RENEW_SECONDS * 3, abs=0.01)


# -- what a stopped CLI left --------------------------------------------------------------


def released_after_quiet(
    keeper: LeaseKeeper, clock: FakeClock, meanwhile: Callable[[], None] = lambda: None
) -> int:
    """``release_spent``, the clock stepped through its quiet time (``meanwhile`` in it)."""
    done: list[int] = []
    thread = threading.Thread(target=lambda: done.append(keeper.release_spent()), daemon=True)
    thread.start()
    assert clock.wait_for_waiters()
    meanwhile()
    clock.step(QUIET_RENEWALS * RENEW_SECONDS)
    thread.join(timeout=10)
    return done[0]


def kill(pid: int) -> None:
    """SIGKILL the child ``pid`` and reap it."""
    os.kill(pid, 9)
    os.waitpid(pid, 0)


def test_the_lock_a_killed_cli_left_goes_once_over(
    locks: StackLocks, clock: FakeClock, pulumi_process: int
) -> None:
    """Renewed by this keeper, its pid gone, untouched since: deleted after the quiet time."""
    path = write_lock(locks, clock, age=0, pid=pulumi_process)
    keeper = LeaseKeeper(locks, clock)
    assert keeper.renew()
    kill(pulumi_process)

    assert released_after_quiet(keeper, clock) == 1
    assert not path.exists()


def test_a_lock_someone_else_renews_meanwhile_stays(
    locks: StackLocks, clock: FakeClock, pulumi_process: int
) -> None:
    """Renewed during the quiet time by another pod of this name: its run lives; kept."""
    path = write_lock(locks, clock, age=0, pid=pulumi_process)
    keeper = LeaseKeeper(locks, clock)
    assert keeper.renew()
    kill(pulumi_process)

    assert released_after_quiet(keeper, clock, lambda: set_age(path, clock, -1)) == 0
    assert path.exists()


def test_a_lock_whose_cli_lives_or_someone_else_renewed_is_no_candidate(
    locks: StackLocks, clock: FakeClock, pulumi_process: int
) -> None:
    """Its pid still pulumi here, or its mtime not this keeper's: kept, nothing waited for."""
    path = write_lock(locks, clock, age=0, pid=pulumi_process)
    keeper = LeaseKeeper(locks, clock)
    assert keeper.renew()
    assert keeper.release_spent() == 0  # its CLI still runs
    kill(pulumi_process)
    set_age(path, clock, -1)  # another keeper wrote its own time
    assert keeper.release_spent() == 0
    assert path.exists()


def test_nothing_renewed_nothing_released(locks: StackLocks, clock: FakeClock) -> None:
    """A keeper that renewed no lock has nothing to release, and does not wait."""
    write_lock(locks, clock, age=0, pid=dead_pid())
    assert LeaseKeeper(locks, clock).release_spent() == 0
    assert len(locks.files()) == 1


def test_a_lock_its_cli_released_is_not_waited_for(
    locks: StackLocks, clock: FakeClock, pulumi_process: int
) -> None:
    """The CLI released its lock as it ended (every run that ends well): no quiet time."""
    path = write_lock(locks, clock, age=0, pid=pulumi_process)
    keeper = LeaseKeeper(locks, clock)
    assert keeper.renew()
    path.unlink()
    assert keeper.release_spent() == 0  # returns at once: the fake clock never moved


# -- the next run's wait ------------------------------------------------------------------


def test_no_lock_or_another_hosts_lock_is_for_the_cli_to_judge(
    locks: StackLocks, clock: FakeClock
) -> None:
    """Free at once: nothing to wait for here (the CLI reports another host's lock)."""
    stop = threading.Event()
    assert settle_own(locks, clock, stop, bound=100).state is Settled.FREE
    foreign = write_lock(locks, clock, age=0, pid=1, host="elsewhere")
    write_lock(locks, clock, age=LAPSE + 1, pid=1)
    assert settle_own(locks, clock, stop, bound=100).state is Settled.FREE
    assert foreign.exists()
    assert len(locks.files()) == 2  # a lapsed lock beside a foreign one stays too


def test_a_lapsed_lock_of_this_name_is_released_at_once(
    locks: StackLocks, clock: FakeClock
) -> None:
    """Unrenewed past the lease and margin: its run is over; released, nothing waited."""
    write_lock(locks, clock, age=LAPSE + 1, pid=1)
    assert settle_own(locks, clock, threading.Event(), bound=100).state is Settled.RELEASED
    assert locks.files() == []


def test_a_renewed_lock_of_this_name_is_waited_for_until_it_lapses(
    locks: StackLocks, clock: FakeClock
) -> None:
    """Renewed just now and then no more: released once the lease and margin have passed."""
    path = write_lock(locks, clock, age=0, pid=1)
    thread, result = in_thread(lambda: settle_own(locks, clock, threading.Event(), bound=200))
    stepped = 0.0
    while waiting(clock, thread):
        assert stepped <= LAPSE, "released before its lease lapsed"
        assert path.exists()
        clock.step(RENEW_SECONDS)
        stepped += RENEW_SECONDS
    thread.join(timeout=10)
    assert result == [Settlement(Settled.RELEASED)]
    assert stepped > LAPSE
    assert not path.exists()


def test_a_lock_that_goes_while_waited_for_frees_the_run(
    locks: StackLocks, clock: FakeClock
) -> None:
    """The earlier run ends and releases its lock: the wait ends, free."""
    path = write_lock(locks, clock, age=0, pid=1)
    thread, result = in_thread(lambda: settle_own(locks, clock, threading.Event(), bound=200))
    assert clock.wait_for_waiters()
    path.unlink()
    clock.step(RENEW_SECONDS)
    thread.join(timeout=10)
    assert result == [Settlement(Settled.FREE)]


def test_a_lock_renewed_all_along_is_held_at_the_bound(locks: StackLocks, clock: FakeClock) -> None:
    """Still renewed when the bound is reached: HELD, naming that lock; never deleted."""
    path = write_lock(locks, clock, age=0, pid=1)
    thread, result = in_thread(lambda: settle_own(locks, clock, threading.Event(), bound=30))
    while waiting(clock, thread):
        clock.step(RENEW_SECONDS)
        set_age(path, clock, 0)  # its run renews it
    thread.join(timeout=10)
    (settled,) = result
    assert settled.state is Settled.HELD
    assert settled.held is not None
    assert settled.held.path == path
    assert path.exists()


def test_a_stop_ends_the_wait(locks: StackLocks, clock: FakeClock) -> None:
    """Stopped while waiting: STOPPED, the lock left alone."""
    path = write_lock(locks, clock, age=0, pid=1)
    stop = threading.Event()
    thread, result = in_thread(lambda: settle_own(locks, clock, stop, bound=200))
    assert clock.wait_for_waiters()
    stop.set()
    thread.join(timeout=10)
    assert result == [Settlement(Settled.STOPPED)]
    assert path.exists()


def test_a_backend_that_cannot_be_read_is_the_clis_to_report(
    locks: StackLocks, clock: FakeClock
) -> None:
    """The locks cannot be listed: free at once; the CLI, which lists them too, says why."""
    locks.dirs[1].write_text("not a directory")
    assert settle_own(locks, clock, threading.Event(), bound=100) == Settlement(Settled.FREE)
