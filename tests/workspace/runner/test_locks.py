"""Stack locks of the file backend: conflicts, who holds them, and clearing stale ones."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from testbed.pulumi_env import PulumiEnv
from tests.workspace.runner.support import STACK, lock_files, run, succeeded, wait_for
from workspace.process import kill_tree
from workspace.runner import ErrorKind, LocalRunner, LockInfo, UpdateRequest
from workspace.runner.locks import is_stale

pytestmark = pytest.mark.pulumi

# Seconds the holder's update takes: past anything the test does while it holds the lock
# (a fixed few seconds' hold can end before the runner's own update asks for the lock on
# a loaded machine); the test kills it once done.
HOLD = 300


def start_holder(pulumi_env: PulumiEnv, program: Path, tmp_path: Path) -> subprocess.Popen[str]:
    """Start a ``pulumi up`` of the same stack that holds its lock until the test kills it.

    It runs from a second copy of the program, its update taking ``HOLD`` seconds; its
    output goes to ``tmp_path / "holder.log"``.
    """
    holder_dir = tmp_path / "holder"
    shutil.copytree(program, holder_dir)  # includes Pulumi.dev.yaml with the encryption salt
    env = {**os.environ, **pulumi_env.env}
    pulumi = str(pulumi_env.bin_dir / "pulumi")
    subprocess.run(
        [pulumi, "--non-interactive", "config", "set", "--stack", STACK, "delay", str(HOLD)],
        cwd=holder_dir,
        env=env,
        check=True,
        capture_output=True,
    )
    with (tmp_path / "holder.log").open("w") as log:
        return subprocess.Popen(
            [pulumi, "--non-interactive", "up", "--yes", "--skip-preview", "--stack", STACK],
            cwd=holder_dir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            text=True,
        )


def test_live_lock_is_a_conflict_and_never_cleared_until_its_holder_dies(
    runner: LocalRunner,
    make_request: Callable[..., UpdateRequest],
    pulumi_env: PulumiEnv,
    program: Path,
    tmp_path: Path,
) -> None:
    """A live update's lock gives CONFLICT and stays, ``locks`` names it; killed, it clears."""
    assert succeeded(run(runner, make_request({"content": "v1"})))
    holder = start_holder(pulumi_env, program, tmp_path)
    try:
        wait_for(lambda: bool(lock_files(pulumi_env)))

        outcome = run(runner, make_request({"content": "v2"}))

        holder_log = (tmp_path / "holder.log").read_text()
        assert outcome.error is ErrorKind.CONFLICT, f"holder {holder.poll()}: {holder_log}"
        assert "locked" in outcome.message
        (held,) = runner.locks(make_request()) or []
        assert (held.pid, held.hostname) == (holder.pid, socket.gethostname())
        assert held.timestamp is not None
        assert not runner.clear_stale_lock(make_request())
        assert len(lock_files(pulumi_env)) == 1
    finally:
        kill_tree(holder.pid)  # like kill -9, without orphaning its plugins
        holder.wait()

    assert runner.clear_stale_lock(make_request())
    assert runner.locks(make_request()) == []
    assert succeeded(run(runner, make_request({"content": "v2"})))


def write_lock(pulumi_env: PulumiEnv, *, pid: int, hostname: str) -> Path:
    """Write a lock file the way the file backend does."""
    directory = pulumi_env.backend_dir / ".pulumi" / "locks" / "organization" / "files" / STACK
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{uuid.uuid4()}.json"
    content = {
        "pid": pid,
        "username": "someone",
        "hostname": hostname,
        "timestamp": "2026-01-02T03:04:05.123456789Z",
    }
    path.write_text(json.dumps(content))
    return path


def dead_pid() -> int:
    """The pid of a process that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_handwritten_stale_lock_blocks_up_until_cleared(
    runner: LocalRunner,
    make_request: Callable[..., UpdateRequest],
    pulumi_env: PulumiEnv,
    target: Path,
) -> None:
    """A lock naming this host and a dead pid gives CONFLICT; clearing it lets ``up`` run."""
    pid = dead_pid()
    write_lock(pulumi_env, pid=pid, hostname=socket.gethostname())

    blocked = run(runner, make_request())

    assert blocked.error is ErrorKind.CONFLICT
    assert runner.locks(make_request()) == [
        LockInfo(
            pid=pid,
            hostname=socket.gethostname(),
            username="someone",
            timestamp=datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
        )
    ]
    assert runner.clear_stale_lock(make_request())
    assert lock_files(pulumi_env) == []
    assert succeeded(run(runner, make_request()))
    assert target.exists()


@pytest.mark.parametrize(
    ("owner", "cleared"),
    [
        pytest.param("this-host-live-non-pulumi", True, id="pid-reused-by-non-pulumi"),
        pytest.param("other-host-dead", False, id="other-host"),
        pytest.param("this-host-no-pid", False, id="unknown-pid"),
    ],
)
def test_clear_stale_lock_rules(
    runner: LocalRunner,
    make_request: Callable[..., UpdateRequest],
    pulumi_env: PulumiEnv,
    owner: str,
    cleared: bool,  # noqa: FBT001 - a test parameter
) -> None:
    """Only locks of this host whose pid is gone or is not pulumi are cleared."""
    pid, host = {
        "this-host-live-non-pulumi": (os.getpid(), socket.gethostname()),
        "other-host-dead": (dead_pid(), "some-other-pod"),
        "this-host-no-pid": (0, socket.gethostname()),
    }[owner]
    lock = write_lock(pulumi_env, pid=pid, hostname=host)

    assert runner.clear_stale_lock(make_request()) is cleared
    assert lock.exists() is not cleared


def test_clear_stale_lock_ignores_other_backends_and_unlocked_stacks(
    runner: LocalRunner, make_request: Callable[..., UpdateRequest], pulumi_env: PulumiEnv
) -> None:
    """No lock, or a backend that is not ``file://``: nothing to clear, and no holders seen."""
    assert not runner.clear_stale_lock(make_request())
    assert runner.locks(make_request()) == []
    lock = write_lock(pulumi_env, pid=dead_pid(), hostname=socket.gethostname())

    s3 = make_request(env={"PULUMI_BACKEND_URL": "s3://bucket"})
    assert not runner.clear_stale_lock(s3)
    assert runner.locks(s3) is None
    assert lock.exists()


def test_unreadable_and_foreign_locks_are_never_stale() -> None:
    """A lock whose file says nothing, or names another host, is treated as live."""
    assert not is_stale(LockInfo())
    assert not is_stale(LockInfo(pid=dead_pid(), hostname="elsewhere"))
    assert is_stale(LockInfo(pid=dead_pid(), hostname=socket.gethostname()))
