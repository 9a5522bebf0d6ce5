"""The run pod's fence: the agent stops its own run once it may no longer go on.

The operator concludes a run whose node it lost (``NodeNotReady``) and starts the next
once the pod is gone, which a force-delete makes true at once, while the lost node's
containers may go on. Two things tell the agent that its run must end, and neither needs
any permission (the pod runs as the tenant's ServiceAccount, which may have none):

* **Its pod is gone.** The kubelet's ServiceAccount token is bound to the pod: the API
  server refuses it (401) once the pod object is gone, or a minute after its deletion
  time. ``PodPresence`` asks ``GET /version`` (readable by every authenticated user) with
  that token every ``POD_CHECK_SECONDS``; refused at every answer for ``POD_GONE_AFTER``
  seconds, the pod is gone. An API server that cannot be reached, or answers 5xx, says
  nothing: runs go on through an API outage.
* **Its lease lapsed.** ``workspace.runner.lease.LeaseKeeper`` renews the CLI's lock of a
  ``file://`` backend; unrenewed for ``INTERRUPT_AFTER`` seconds (the backend failing),
  the run can no longer vouch for itself, and the next run will take the lock once
  ``locks.LEASE_SECONDS`` plus a margin have passed.

``Fence.check`` then sets the run's stop event, which interrupts the CLI the way Ctrl-C
does (it finishes the resource operations in flight, writes its checkpoint and releases
its lock; killed after the interrupt grace). A lapsed lease is a deadline: unrenewed for
``KILL_AFTER`` seconds, the CLI and every process under the agent are killed at once, so
that none runs once the lease has run out. The run's outcome says why it stopped.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import structlog

from controller.clock import Clock
from workspace.process import descendants
from workspace.runner.lease import QUIET_RENEWALS, RENEW_SECONDS, LeaseKeeper
from workspace.runner.locks import LEASE_MARGIN, LEASE_SECONDS
from workspace.runner.types import DEFAULT_INTERRUPT_GRACE

log = structlog.get_logger(__name__)

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
POD_CHECK_SECONDS = 5.0  # how often the agent asks whether its pod still exists
POD_ASK_TIMEOUT = 5.0  # seconds one such question may take
# A token's successful authentication is cached by kube-apiserver this long (its default):
# a refusal can come this much later than the pod's deletion.
TOKEN_CACHE_SECONDS = 10.0
POD_GONE_AFTER = 15.0  # seconds of refusals (and at least two) that prove the pod gone
INTERRUPT_AFTER = LEASE_SECONDS / 2  # seconds unrenewed: interrupt the CLI
KILL_AFTER = LEASE_SECONDS - 2 * RENEW_SECONDS  # seconds unrenewed: kill it
CHECK_SECONDS = 1.0  # how often the fence looks
STOP_BOUND = (
    POD_CHECK_SECONDS
    + TOKEN_CACHE_SECONDS
    + POD_GONE_AFTER
    + DEFAULT_INTERRUPT_GRACE
    + (QUIET_RENEWALS + 1) * RENEW_SECONDS
)
"""The longest a run whose pod was deleted takes to stop and release the lock it held."""
SETTLE_BOUND = max(LEASE_SECONDS + LEASE_MARGIN, STOP_BOUND) + RENEW_SECONDS
"""How long the next run waits for an earlier run pod's lock before it says ``CONFLICT``:
long enough for a dead run's lease to lapse, and for a deleted pod's run to stop itself."""

Ask = Callable[[], int | None]
"""One question to the API server: its HTTP status, or None when there was no answer."""


class PodPresence:
    """Whether the API server still takes this pod's token (not thread-safe: one asker)."""

    def __init__(self, ask: Ask, clock: Clock) -> None:
        """Ask with ``ask``; time the refusals on ``clock``."""
        self.ask, self.clock = ask, clock
        self.refused_since: float | None = None  # clock time of the first refusal in a row
        self.refusals = 0

    @classmethod
    def from_environment(cls, environ: Mapping[str, str], clock: Clock) -> PodPresence | None:
        """The pod's presence through its in-cluster API address and token; None outside one."""
        host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
        token, ca = SERVICE_ACCOUNT / "token", SERVICE_ACCOUNT / "ca.crt"
        if not host or not port or not token.is_file():
            return None
        address = f"[{host}]" if ":" in host else host
        server = f"https://{address}:{port}"
        return cls(lambda: version_status(server, token, ca if ca.is_file() else None), clock)

    def observe(self, status: int | None) -> None:
        """Take one answer (an HTTP status, or None when there was none).

        401 is a refusal; another status (the token was taken) ends a run of refusals; no
        answer, 429 or a 5xx says nothing.
        """
        if status == 401:
            if self.refused_since is None:
                log.warning("The API server refuses this pod's ServiceAccount token")
                self.refused_since = self.clock.now()
            self.refusals += 1
        elif status is not None and status != 429 and status < 500:
            self.refused_since, self.refusals = None, 0

    def gone(self) -> bool:
        """Whether every answer for ``POD_GONE_AFTER`` seconds (two at least) refused the token."""
        if self.refused_since is None or self.refusals < 2:
            return False
        return self.clock.now() - self.refused_since >= POD_GONE_AFTER

    @contextlib.contextmanager
    def watched(self) -> Iterator[PodPresence]:
        """Ask every ``POD_CHECK_SECONDS`` on a thread of its own until the block ends."""
        done = threading.Event()

        def loop() -> None:
            while not done.is_set():
                self.observe(self.ask())
                self.clock.wait_event(done, self.clock.now() + POD_CHECK_SECONDS)

        thread = threading.Thread(target=loop, name="pod-presence", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            done.set()


def version_status(server: str, token: Path, ca: Path | None) -> int | None:
    """``GET <server>/version`` with the bearer token in ``token``: its status, or None.

    The token is read afresh each time (the kubelet rotates it). No proxy is used: the
    API server's address is the cluster's own.
    """
    try:
        bearer = token.read_text().strip()
    except OSError:
        return None
    context = ssl.create_default_context(cafile=str(ca)) if ca is not None else None
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    request = urllib.request.Request(  # noqa: S310 - the cluster's own https address
        f"{server}/version", headers={"Authorization": f"Bearer {bearer}"}
    )
    try:
        with opener.open(request, timeout=POD_ASK_TIMEOUT) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
    except (OSError, ValueError, http.client.HTTPException):
        return None


class Fence:
    """Stops the run when its pod is gone or its lease lapsed (see the module docstring)."""

    def __init__(
        self,
        stop: threading.Event,
        clock: Clock,
        *,
        pod: PodPresence | None = None,
        kill: Callable[[], int] | None = None,
    ) -> None:
        """Set ``stop`` to interrupt the run; ``kill`` kills its processes (how many)."""
        self.stop, self.clock, self.pod = stop, clock, pod
        self.kill = kill or kill_children
        self.keeper: LeaseKeeper | None = None  # the lease kept while the CLI runs
        self.reason: str | None = None  # why the run was stopped, once it was
        self.killed = 0

    def check(self) -> None:
        """Interrupt the run once it must end; kill its processes once its lease ran out."""
        why = self._why()
        if why is not None and self.reason is None:
            log.warning("Stopping the run: it may no longer go on", reason=why)
            self.reason = why
            self.stop.set()
        keeper = self.keeper
        if keeper is not None and keeper.lapsed() >= KILL_AFTER:
            killed = self.kill()
            if killed and not self.killed:
                log.warning("Killed the run's processes: its lease ran out", processes=killed)
            self.killed += killed

    @contextlib.contextmanager
    def keeping(self, keeper: LeaseKeeper) -> Iterator[LeaseKeeper]:
        """Within the block, ``keeper``'s lease is kept and checked."""
        self.keeper = keeper
        try:
            with keeper.kept():
                yield keeper
        finally:
            self.keeper = None

    @contextlib.contextmanager
    def watching(self) -> Iterator[Fence]:
        """Check every ``CHECK_SECONDS`` (and ask about the pod) until the block ends."""
        done = threading.Event()

        def loop() -> None:
            while not self.clock.wait_event(done, self.clock.now() + CHECK_SECONDS):
                self.check()

        with self.pod.watched() if self.pod is not None else contextlib.nullcontext():
            thread = threading.Thread(target=loop, name="fence", daemon=True)
            thread.start()
            try:
                yield self
            finally:
                done.set()
                thread.join(timeout=CHECK_SECONDS * 2)

    def _why(self) -> str | None:
        if self.pod is not None and self.pod.gone():
            return POD_GONE
        keeper = self.keeper
        if keeper is not None and keeper.lapsed() >= INTERRUPT_AFTER:
            return (
                f"its lease on the stack's lock could not be renewed for {keeper.lapsed():.0f} s "
                "(the backend cannot be written): it stops before the next run may take the lock"
            )
        return None


POD_GONE = (
    "its pod was deleted: the API server refuses the pod's ServiceAccount token (the pod "
    "was force-deleted, or deleted while its node was lost); the operator no longer "
    "follows this run, so it stops before another run of the Stack may take the lock"
)


def kill_children() -> int:
    """SIGKILL the process group of every descendant of this process (not its own group).

    The CLI and each of its plugins lead groups of their own; how many groups were killed.
    """
    own = os.getpgrp()
    groups = {group for _, group in descendants(os.getpid())} - {own}
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    return len(groups)
