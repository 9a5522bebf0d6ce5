"""What both modes of ``make dev`` share: the sample Stack, the state directory, the waits.

``hack/dev.py`` (the operator as a local process) and ``hack/dev_node.py`` (its image on a
real node, ``--node``) both import this module, and neither imports the other at import
time (``hack.dev`` loads ``hack.dev_node`` only for ``--node``).

Provides the sample's names (``NAMESPACE``, ``STACK``, ``PROGRAM``) and manifests
(``sample_manifests``), the operator's ``SHUTDOWN_TIMEOUT``, ``DevError`` (what the
developer must fix) and ``say`` (one progress line), ``claimed`` (the state directory,
locked and emptied) and the waits on the sample Stack (``Watched``, ``is_ready``,
``wait_ready``, ``follow``, ``until_ready``).

Guarantees: ``claimed`` only ever empties a directory that is empty or marked as a dev
state directory, and never one another run holds; the waits poll the Stack (every 0.5 s)
and call ``check_operator`` on each look, so a failed operator ends them with its
``DevError``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn, Protocol

REPO = Path(__file__).resolve().parents[1]
PROGRAM = REPO / "testbed" / "programs" / "files"
LOCK = ".dev.lock"  # marks a directory as ours (only such a directory is ever wiped)
NAMESPACE, STACK = "default", "sample"
# A throw-away passphrase for a throw-away backend under the state directory.
PASSPHRASE = "dev-passphrase-not-a-secret"  # noqa: S105
# Seconds running updates get after SIGTERM; the operator's default (600) suits a pod,
# not a developer waiting at a terminal.
SHUTDOWN_TIMEOUT = 10


class DevError(RuntimeError):
    """Something the developer must fix; the message says what."""


def say(message: str) -> None:
    """One short progress line."""
    print(f"[dev] {message}", flush=True)


# -- the state directory ----------------------------------------------------------------


@contextlib.contextmanager
def claimed(state: Path) -> Iterator[None]:
    """Hold the state directory's lock and empty it (all but the lock) for a fresh run.

    Raises:
        DevError: another run holds it, or it is a non-empty directory of someone else's.
    """
    state.mkdir(parents=True, exist_ok=True)
    lock = state / LOCK
    if not lock.exists() and any(state.iterdir()):
        msg = f"{state} is not empty and not a dev state directory; pick another --state-dir"
        raise DevError(msg)
    with lock.open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            msg = f"another hack/dev.py is running in {state}; stop it or pass --state-dir"
            raise DevError(msg) from None
        for entry in state.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            elif entry.name != LOCK:
                entry.unlink()
        yield


# -- the sample -------------------------------------------------------------------------


def sample_manifests(repo: str, backend: Path, output: Path) -> list[dict[str, Any]]:
    """The passphrase Secret and the sample Stack, which writes ``output``."""
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "pulumi-secrets", "namespace": NAMESPACE},
        "stringData": {"passphrase": PASSPHRASE},
    }
    passphrase = {"type": "Secret", "secret": {"name": "pulumi-secrets", "key": "passphrase"}}
    stack = {
        "apiVersion": "pulumi.com/v1",
        "kind": "Stack",
        "metadata": {"name": STACK, "namespace": NAMESPACE},
        "spec": {
            "stack": "dev",
            "backend": f"file://{backend}",
            "projectRepo": repo,
            "branch": "main",
            "resyncFrequencySeconds": 60,
            "config": {"path": str(output), "content": "hello from make dev\n"},
            "envRefs": {"PULUMI_CONFIG_PASSPHRASE": passphrase},
        },
    }
    return [secret, stack]


def is_ready(obj: dict[str, Any]) -> bool:
    """Ready=True, and the status is about the current generation."""
    status = obj.get("status") or {}
    current = status.get("observedGeneration") == obj["metadata"]["generation"]
    ready = [c for c in status.get("conditions", []) if c["type"] == "Ready"]
    return current and bool(ready) and ready[0]["status"] == "True"


# -- waiting ----------------------------------------------------------------------------


class Watched(Protocol):
    """What the waits need of a run: the local one (DevCluster) or the node's (dev_node)."""

    following: bool  # the operator's log is echoed to stdout

    @property
    def log_hint(self) -> str:
        """Where the operator's log is."""

    def stack(self) -> dict[str, Any]:
        """The sample Stack as the API serves it."""

    def check_operator(self) -> None:
        """Raise DevError if the operator has failed for good."""

    def echo_log(self) -> None:
        """Copy the operator's new log lines to stdout."""


def wait_ready(dev: Watched, deadline: float) -> bool:
    """Poll the sample Stack until Ready (True) or ``deadline`` (False)."""
    while time.monotonic() < deadline:
        dev.check_operator()
        if is_ready(dev.stack()):
            return True
        time.sleep(0.5)
    return False


def follow(dev: Watched, started: float, timeout: float) -> NoReturn:
    """Echo the operator's log and report readiness, until interrupted."""
    dev.following, reported = True, False
    while True:
        dev.echo_log()
        dev.check_operator()
        if not reported and is_ready(dev.stack()):
            say(f"Stack {NAMESPACE}/{STACK} is Ready ({time.monotonic() - started:.0f}s)")
            reported = True
        elif not reported and time.monotonic() - started > timeout:
            say(f"Stack {NAMESPACE}/{STACK} is not Ready after {timeout:.0f}s; see its status")
            reported = True
        time.sleep(0.5)


def until_ready(dev: Watched, started: float, timeout: float) -> int:
    """Wait for the sample Stack: 0 once Ready, 1 (its status printed) after ``timeout``."""
    if wait_ready(dev, started + timeout):
        say(f"Stack {NAMESPACE}/{STACK} is Ready ({time.monotonic() - started:.0f}s)")
        return 0
    status = json.dumps(dev.stack().get("status"), indent=1)
    say(f"Stack {NAMESPACE}/{STACK} is not Ready after {timeout:.0f}s:\n{status}")
    say(f"operator log: {dev.log_hint}")
    return 1
