"""Stack locks of self-managed ``file://`` backends: who holds one, and whether it is stale.

The file backend keeps one JSON file per lock (pid, username, hostname, timestamp) under
``<backend>/.pulumi/locks/``. Other backends keep their locks where a runner cannot read
them: for those, nothing here finds or clears anything.
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


@dataclass(frozen=True, slots=True)
class LockFile:
    """One lock file of a stack and what it says."""

    path: Path
    info: LockInfo


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


def lock_files(backend: Path, project: Project, stack: str) -> list[LockFile]:
    """The stack's lock files with what they say, oldest first (unreadable ones say nothing).

    Lock directories: ``<org>/<project>/<stack>``, or for an unqualified stack name both
    ``organization/<project>/<stack>`` and the legacy ``<stack>``.
    """
    locks = backend / ".pulumi" / "locks"
    parts = stack.split("/")
    if len(parts) == 3:
        dirs = [locks.joinpath(*parts)]
    else:
        dirs = [locks / "organization" / project.name / parts[-1], locks / parts[-1]]
    found = [LockFile(path, _parse_lock(path)) for d in dirs for path in d.glob("*.json")]
    epoch = datetime.min.replace(tzinfo=UTC)
    return sorted(found, key=lambda lock: lock.info.timestamp or epoch)


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
    for lock in locks:
        lock.path.unlink(missing_ok=True)
        Path(f"{lock.path}.attrs").unlink(missing_ok=True)  # gocloud fileblob's metadata
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


def release_own(request: UpdateRequest, home: Path) -> bool:
    """Delete the stack's locks if every one was taken on a host of this host's name.

    A run pod's hostname is its name, which is the Stack's: a lock of that name was left
    by an earlier run pod of the same Stack, which is gone (one run pod per Stack). False
    when the project cannot be read, the backend is not ``file://`` or a lock is another's.
    """
    try:
        project = load_project(request.work_dir)
    except StepFailedError:
        return False
    backend = backend_dir(request, project, request.pulumi_home or home)
    if backend is None:
        return False
    found = lock_files(backend, project, request.stack)
    host = socket.gethostname()
    if not found or any(lock.info.hostname != host for lock in found):
        return False
    for lock in found:
        lock.path.unlink(missing_ok=True)
        Path(f"{lock.path}.attrs").unlink(missing_ok=True)  # gocloud fileblob's metadata
    log.warning("Released the lock an earlier run pod of this Stack left", locks=len(found))
    return True
