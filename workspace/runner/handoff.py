"""The checkout's hand-off to the run when both start at once (``CHECKOUT_ALONGSIDE``).

A run pod checks its source out either in an init container (the kubelet starts the run
container once the checkout has exited) or, when the pod allows it, in a container beside
the run container, both started together: the run's agent then starts up while the source
is checked out, and no kubelet round trip separates the two. Beside each other, the run
waits for the checkout here.

Guarantees, for two processes sharing ``workspace`` (an emptyDir of one pod, or one
directory on one machine):

* ``Handoff.checking_out`` (the checkout) holds an exclusive ``flock`` on ``LOCK`` from
  before that file's name exists (it is locked under a temporary name, then renamed) until
  the checkout's results are written and ``DONE`` marks them complete; the lock goes with
  the process, whatever ends it (an exit, a crash, SIGKILL, an OOM kill).
* ``Handoff.wait`` (the run) returns ``FINISHED`` once the checkout's results are
  complete, ``ABANDONED`` when the checkout's process ended without completing them (its
  lock released and no ``DONE``), ``STOPPED`` when ``stop`` is set first. It waits for as
  long as the checkout has not started: a checkout container the kubelet cannot start is
  the operator's to conclude (it sees the container's waiting reason).
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path

CHECKOUT_ALONGSIDE = "PSO_CHECKOUT_ALONGSIDE"
"""Set to ``1`` in the run container's environment when the checkout runs beside it."""
LOCK = "checkout.lock"
DONE = "checkout-done"
POLL_SECONDS = 0.02  # how often the run looks at the checkout while it waits


class Handed(enum.Enum):
    """How the wait for the checkout ended."""

    FINISHED = "finished"
    ABANDONED = "abandoned"
    STOPPED = "stopped"


class Handoff:
    """The hand-off files in ``workspace`` (see the module docstring)."""

    def __init__(self, workspace: Path) -> None:
        """Hand off through ``workspace``."""
        self.lock = workspace / LOCK
        self.done = workspace / DONE

    @contextlib.contextmanager
    def checking_out(self) -> Iterator[None]:
        """Hold the checkout's lock for the block; mark it done when the block returns.

        An exception out of the block leaves no ``DONE``: the run sees ``ABANDONED``.
        """
        staged = self.lock.with_name(f".{LOCK}.{os.getpid()}")
        fd = os.open(staged, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            staged.rename(self.lock)
            yield
            self.done.touch()
        finally:
            os.close(fd)

    def wait(self, stop: threading.Event) -> Handed:
        """Wait for the checkout to start and end: how it ended (see the module docstring)."""
        while not self.lock.exists():
            if stop.wait(POLL_SECONDS):
                return Handed.STOPPED
        fd = os.open(self.lock, os.O_RDONLY)
        try:
            while not _try_lock(fd):
                if stop.wait(POLL_SECONDS):
                    return Handed.STOPPED
        finally:
            os.close(fd)
        return Handed.FINISHED if self.done.exists() else Handed.ABANDONED


def _try_lock(fd: int) -> bool:
    """Whether a shared lock on ``fd`` was had at once (the checkout's is gone)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
