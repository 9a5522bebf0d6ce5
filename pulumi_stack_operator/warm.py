"""A run pod kept warm: its agent waits for its Stack's next job after reporting an outcome.

With ``PSO_KEEP_WARM`` (seconds, > 0; the operator's ``--run-pod-keep-warm``) the run
container's agent, once it has printed its outcome, waits up to that long for another
job of the same Stack, so that a burst of changes pays one pod start. The operator hands a
job over by running ``pulumi-stack-operator agent take`` in the container (an exec through
the API server) with one line of JSON on its stdin (``workspace.handover``: a mark,
the operation, the job document and its trace context; never a secret value: the pod's
Secret-backed variables are those of the pod, which the operator reuses only while the
Secrets and ConfigMaps it reads are unchanged).

The inbox is a directory of the pod's own (``PSO_WARM_INBOX``, default ``/tmp/pso-warm``,
on the pod's ``/tmp`` emptyDir):

* ``take`` holds an exclusive ``flock`` on ``lock`` while it writes ``job.json``
  (atomically: a temporary file renamed). It refuses (exit status ``REFUSED``, the reason
  on stdout) when it cannot take the lock at once, because the agent is ending, or when a
  job is already waiting.
* The idle agent looks for ``job.json`` every ``POLL`` seconds, and at once when a
  ``take`` rings the inbox's bell (``bell``, a FIFO the waiting agent holds open: a byte
  written once the job is in place and the lock let go). Once the window has passed
  since its last outcome it takes the lock without waiting and ends (exit 0, the pod
  ``Succeeded``) if no job is waiting, holding the lock until it exits: a ``take`` either
  lands before that, and its job runs, or is refused, and the operator starts a new pod.
* A job taken starts with ``job_line(mark)`` on the report channel, so that the operator
  reads only its own reports from a log that holds the earlier runs' too, in a container
  with nothing of the earlier run left running (``kill_leftovers``) and an empty source
  directory.
* SIGTERM (the pod deleted) ends the wait at once: the agent sets its stop and rings.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import stat
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from controller.clock import Clock
from workspace.handover import ACCEPTED_LINE, KEEP_WARM_ENV, Delivery

INBOX_ENV: Final = "PSO_WARM_INBOX"
DEFAULT_INBOX: Final = "/tmp/pso-warm"  # noqa: S108 - the pod's own emptyDir
POLL: Final = 0.2  # seconds between looks into the inbox while idle, bell or not
BELL: Final = "bell"  # the FIFO a take writes to, so the waiting agent looks at once
REFUSED: Final = 3  # take's exit status when the job was not taken
ACCEPTED: Final = ACCEPTED_LINE  # take's stdout when it was: the operator reads only this


def keep_warm(environ: Mapping[str, str]) -> float:
    """The window (``PSO_KEEP_WARM`` seconds); 0 when unset or not a positive number."""
    try:
        window = float(environ.get(KEEP_WARM_ENV, "0"))
    except ValueError:
        return 0.0
    return window if window > 0 else 0.0


def inbox_of(environ: Mapping[str, str]) -> Inbox:
    """The inbox the environment names (``PSO_WARM_INBOX``), else ``DEFAULT_INBOX``."""
    return Inbox(Path(environ.get(INBOX_ENV) or DEFAULT_INBOX))


@dataclass(frozen=True)
class Inbox:
    """The directory a warm agent takes its next job from (see the module doc)."""

    path: Path

    @property
    def job_file(self) -> Path:
        """Where a taken job waits for the agent."""
        return self.path / "job.json"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[IO[str] | None]:
        """The inbox's lock, taken without waiting; None when another holds it."""
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        with (self.path / "lock").open("a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield None
                return
            yield handle

    def take(self, delivery: Delivery, said: IO[str] | None = None) -> str | None:
        """Leave ``delivery`` for the agent: None when taken, else why it was refused.

        ``ACCEPTED`` is written to ``said`` while the lock is still held: the agent takes
        the lock before it runs the job (and kills what is left of the last run), so the
        word is out before this process can be killed.
        """
        with self._locked() as held:
            if held is None:
                return "the run pod's agent is ending"
            if self.job_file.exists():
                return "a job is already waiting in the run pod"
            partial = self.path / f".job.{os.getpid()}.tmp"
            partial.write_text(delivery.encode())
            partial.rename(self.job_file)
            if said is not None:
                print(ACCEPTED, file=said, flush=True)
        self.ring()
        return None

    def ring(self) -> None:
        """Wake the agent waiting on the bell; nothing when none waits (no reader: ENXIO)."""
        try:
            bell = os.open(self.path / BELL, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return
        with contextlib.suppress(OSError):  # full (EAGAIN): it rings already
            os.write(bell, b"\n")
        os.close(bell)

    @contextlib.contextmanager
    def _bell(self) -> Iterator[int | None]:
        """The bell, open for reading while the agent waits; None when it cannot be made.

        Opened for reading and writing, so that it never reads as ended (no other writer).
        """
        path = self.path / BELL
        try:
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.mkfifo(path, 0o600)
            bell = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        except OSError:
            yield None
            return
        try:
            yield bell if stat.S_ISFIFO(os.fstat(bell).st_mode) else None
        finally:
            os.close(bell)

    def wait(self, stop: threading.Event, window: float, clock: Clock) -> Delivery | None:
        """The next job, or None after ``window`` seconds without one, or once ``stop`` is set.

        On None the lock stays held by this process (until it exits), so that no job is
        taken that nobody will run. A job file that does not decode is dropped.
        """
        give_up = clock.now() + window
        with self._bell() as bell:
            while not stop.is_set():
                if (delivery := self._next()) is not None:
                    return delivery
                if clock.now() >= give_up and self._close():
                    return None
                _doze(bell, stop)
        return None

    def _next(self) -> Delivery | None:
        """The job left in the inbox, once its ``take`` has let go of the lock."""
        if not self.job_file.exists():
            return None
        with self._locked() as held:
            if held is None:
                return None  # its take is still answering: look again
            text = self.job_file.read_text()
            self.job_file.unlink()
        try:
            return Delivery.decode(text)
        except ValueError as err:
            _log().warning("Dropped a job that does not decode", error=str(err))
            return None

    def _close(self) -> bool:
        """Take the lock for good (True) unless a ``take`` holds it or left a job (False)."""
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        handle = (self.path / "lock").open("a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return False
        if self.job_file.exists():
            handle.close()  # releases the lock: the job is run first
            return False
        CLOSED.append(handle)  # kept open, so locked, until the process exits
        return True


def _doze(bell: int | None, stop: threading.Event) -> None:
    """Wait ``POLL`` seconds, less once the bell rings (its bytes read); no bell: ``stop``."""
    if bell is None:
        stop.wait(POLL)
        return
    rung, _, _ = select.select([bell], [], [], POLL)
    if rung:
        with contextlib.suppress(BlockingIOError):
            while os.read(bell, 512):
                pass


CLOSED: list[IO[str]] = []
"""The locks of inboxes this process closed, held open (so locked) until it exits."""


def take_main(stdin: IO[str], stdout: IO[str], environ: Mapping[str, str]) -> int:
    """``agent take``: read one delivery line, leave it in the inbox; 0 taken, else ``REFUSED``."""
    try:
        delivery = Delivery.decode(stdin.readline())
    except ValueError as err:
        print(f"refused: {err}", file=stdout)
        return 2
    why = inbox_of(environ).take(delivery, stdout)
    if why is not None:
        print(f"refused: {why}", file=stdout, flush=True)
    return 0 if why is None else REFUSED


def kill_leftovers(proc: Path = Path("/proc")) -> list[int]:
    """In a run container, SIGKILL every process but PID 1 (tini) and this one; the pids.

    What a run's program left running (a daemon, a child that outlived the CLI) must not
    see or touch the next job. Anywhere else (this process not tini's child: the agent
    runner's processes on a machine, a test) it kills nothing.
    """
    if not in_run_container(proc):
        return []
    killed = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) in (1, os.getpid()):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(int(entry.name), signal.SIGKILL)
            killed.append(int(entry.name))
    return killed


def in_run_container(proc: Path = Path("/proc")) -> bool:
    """Whether this process is the child of a PID 1 that is tini (the run pod's init)."""
    if os.getppid() != 1:
        return False
    try:
        command = (proc / "1" / "cmdline").read_bytes().split(b"\0", 1)[0]
    except OSError:
        return False
    return command.endswith(b"/tini")


def _log() -> Any:  # noqa: ANN401 - structlog's logger
    """This module's logger, structlog imported at the first use.

    ``take`` never logs and runs in the handover's critical path, where structlog (and
    asyncio with it) would be about 70 ms of imports.
    """
    import structlog  # noqa: PLC0415

    return structlog.get_logger(__name__)
