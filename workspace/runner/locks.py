"""Stack locks of self-managed ``file://`` backends: who holds one, and whether it is stale.

The file backend keeps one JSON file per lock (pid, username, hostname, timestamp) under
``<backend>/.pulumi/locks/``. Other backends keep their locks where a runner cannot read
them: for those, nothing here finds or clears anything.

A run pod's lock is also its run's lease (``workspace.runner.lease`` renews it): the
lock file's mtime is when the run last said it may still be going on. A lock whose
hostname is this host's was taken by a run pod of the same Stack (its hostname is its
name, the Stack's), which may still run on a node the cluster lost: it is released only
once its lease has lapsed (``lease_lapsed``: unrenewed for ``LEASE_SECONDS`` plus
``LEASE_MARGIN``), never on the strength of the name alone.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import structlog

from controller.clock import parse_time
from workspace.runner.failures import StepFailedError
from workspace.runner.home import current_login
from workspace.runner.project import Project, load_project
from workspace.runner.types import LockInfo, UpdateRequest

log = structlog.get_logger(__name__)

LEASE_SECONDS = 60.0
"""How long a renewed run-pod lock stands for a run that may still go on.

Its agent renews it every ``lease.RENEW_SECONDS`` while its CLI lives, and makes sure its
CLI is dead before this long has passed since the last renewal it could make
(``pulumi_stack_operator.fence``)."""
LEASE_MARGIN = 15.0
"""Seconds a lapsed lease is waited for beyond ``LEASE_SECONDS``: clocks of two nodes (or of
a node and the file server) that differ, and the time a kill takes."""


@dataclass(frozen=True, slots=True)
class LockFile:
    """One lock file of a stack, what it says and when it was last renewed (its mtime)."""

    path: Path
    info: LockInfo
    renewed: datetime | None = None


@dataclass(frozen=True, slots=True)
class StackLocks:
    """Where one stack's lock files are: the lock directories of a ``file://`` backend."""

    dirs: tuple[Path, ...]

    def files(self) -> list[LockFile]:
        """The stack's lock files, oldest first; ``OSError`` when a directory cannot be read.

        A lock directory that does not exist holds no lock; any other failure to list one
        (the backend's volume gone or failing) raises, unlike ``glob``, which hides it.
        """
        found = [_lock_file(path) for d in self.dirs for path in _listing(d)]
        epoch = datetime.min.replace(tzinfo=UTC)
        return sorted(found, key=lambda lock: lock.info.timestamp or epoch)


def lease_lapsed(lock: LockFile, now: datetime) -> bool:
    """Whether ``lock`` has gone unrenewed for ``LEASE_SECONDS`` plus ``LEASE_MARGIN`` at ``now``.

    A lock whose renewal time cannot be read has not lapsed: only time proves a run over.
    """
    if lock.renewed is None:
        return False
    return (now - lock.renewed).total_seconds() > LEASE_SECONDS + LEASE_MARGIN


def stack_locks(request: UpdateRequest, home: Path) -> StackLocks | None:
    """The request's stack's lock directories; None when not ``file://`` or no project.

    ``home`` is the ``PULUMI_HOME`` of requests without one of their own.
    """
    try:
        project = load_project(request.work_dir)
    except StepFailedError:
        return None
    backend = backend_dir(request, project, request.pulumi_home or home)
    return None if backend is None else StackLocks(lock_dirs(backend, project, request.stack))


def backend_dir(request: UpdateRequest, project: Project, home: Path) -> Path | None:
    """The directory of a ``file://`` backend, chosen the way the CLI chooses it; else None.

    The request's ``PULUMI_BACKEND_URL``, else the project's backend, else the login
    saved in ``home`` (the ``PULUMI_HOME`` the CLI runs with).
    """
    url = request.env.get("PULUMI_BACKEND_URL") or project.backend_url or current_login(home)
    if not url or not url.startswith("file://"):
        return None
    path = Path(url.removeprefix("file://").split("?", 1)[0]).expanduser()
    return path if path.is_absolute() else request.work_dir / path  # relative to the CLI's cwd


def lock_dirs(backend: Path, project: Project, stack: str) -> tuple[Path, ...]:
    """The stack's lock directories in ``backend``.

    ``<org>/<project>/<stack>``, or for an unqualified stack name both
    ``organization/<project>/<stack>`` and the legacy ``<stack>``.
    """
    locks = backend / ".pulumi" / "locks"
    parts = stack.split("/")
    if len(parts) == 3:
        return (locks.joinpath(*parts),)
    return (locks / "organization" / project.name / parts[-1], locks / parts[-1])


def lock_files(backend: Path, project: Project, stack: str) -> list[LockFile]:
    """The stack's lock files with what they say, oldest first (unreadable ones say nothing).

    A lock directory that cannot be listed holds none here (``StackLocks.files`` raises).
    """
    try:
        return StackLocks(lock_dirs(backend, project, stack)).files()
    except OSError:
        return []


def clear_stale(locks: list[LockFile], stack: str) -> bool:
    """Delete ``locks`` if every one is stale; True if there were some and they were deleted.

    A lock is stale when its hostname is this host's and its pid is not running, or the
    pid now belongs to a process that is not pulumi (the pid was reused). A lock from
    another host, from a live pulumi process, or unreadable, is live: then nothing is
    touched.
    """
    bound = log.bind(pulumi_stack=stack)
    if not locks:
        return False
    live = [lock.info for lock in locks if not is_stale(lock.info)]
    if live:
        bound.info("Stack lock is held by a live or foreign process", lock=str(live[0]))
        return False
    delete(locks)
    for lock in locks:
        bound.warning("Cleared stale stack lock", lock=str(lock.info))
    return True


def is_stale(info: LockInfo) -> bool:
    """Written on this host by a process that is gone or is no longer pulumi."""
    if info.hostname != socket.gethostname() or info.pid is None or info.pid <= 0:
        return False
    try:
        os.kill(info.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, another user's: look at what it runs
    return not _runs_pulumi(info.pid)


def _listing(directory: Path) -> list[Path]:
    """The lock files in ``directory`` (none when it does not exist); raises other errors."""
    try:
        return [path for path in directory.iterdir() if path.name.endswith(".json")]
    except FileNotFoundError:
        return []


def _lock_file(path: Path) -> LockFile:
    """The lock at ``path``: what it says and its mtime (None when it cannot be read)."""
    try:
        renewed: datetime | None = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    except OSError:
        renewed = None
    return LockFile(path, _parse_lock(path), renewed)


def _parse_lock(path: Path) -> LockInfo:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return LockInfo()
    if not isinstance(data, dict):
        return LockInfo()
    pid, hostname, username = data.get("pid"), data.get("hostname"), data.get("username")
    return LockInfo(
        pid=pid if isinstance(pid, int) else None,
        hostname=hostname if isinstance(hostname, str) else None,
        username=username if isinstance(username, str) else None,
        timestamp=parse_time(data.get("timestamp")),
    )


def _runs_pulumi(pid: int) -> bool:
    """Whether ``pid`` runs a pulumi binary; True when we cannot tell (be conservative)."""
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except FileNotFoundError:
        return False  # exited since the check
    except OSError:
        return True
    return Path(argv0.decode(errors="replace")).name.startswith("pulumi")


def lock_files_or_none(locks: StackLocks) -> list[LockFile] | None:
    """``locks.files()``, or None when the backend cannot be read now."""
    try:
        return locks.files()
    except OSError as err:
        log.warning("Cannot read the stack's locks", error=type(err).__name__)
        return None


def delete(locks: list[LockFile]) -> None:
    """Delete each lock file, and its gocloud fileblob metadata beside it."""
    for lock in locks:
        lock.path.unlink(missing_ok=True)
        Path(f"{lock.path}.attrs").unlink(missing_ok=True)
