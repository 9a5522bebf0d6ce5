"""Run one child process in a process group of its own: stream its output, stop it, time it out.

``run`` is the one way the operator starts a program (git, the Pulumi CLI). The child leads
a new session, so that it and everything it starts can be signalled together:

* ``stop`` set while the child runs: SIGINT to the child's process group (what Ctrl-C in a
  terminal does); if the child still runs ``Command.grace`` seconds later, ``kill_tree``.
* ``Command.timeout`` (wall-clock seconds from the start) reached: ``kill_tree`` at once.
* ``stop`` set before the start: nothing starts, ``StoppedError`` is raised.
* the caller unwinding (an exception, KeyboardInterrupt): ``kill_tree``, so nothing is left.

``kill_tree`` stops the child's group, then SIGKILLs it and the process group of every
descendant found in ``/proc`` (Linux), so helpers that left the group (Pulumi starts each
plugin in a group of its own) die too.

The child's exit is noticed at once: its pidfd (Linux 5.3 and later) is waited on for up to
one poll interval at a time, so a stop or a deadline is still checked as often; without
pidfds, ``Popen.wait`` polls (its back-off notices an exit up to 50 ms late).

stdout and stderr are read on threads, line by line, and handed to the callbacks (without
the line end) as they come, and collected: the ``Completed`` holds the complete texts (decoded
as UTF-8, invalid bytes replaced). A failing callback is logged and never stops the
reading. ``Command.stdin`` is written on a thread too, so a child that does not read it
cannot block the caller's stop or timeout.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import structlog

from controller.clock import Clock, RealClock

log = structlog.get_logger(__name__)

REAL_CLOCK = RealClock()

DEFAULT_GRACE = 10.0  # seconds between SIGINT (on stop) and SIGKILL
_POLL_SECONDS = 0.1  # how often a running child's stop event and deadline are checked
_READER_JOIN_SECONDS = 10.0  # a descendant may hold the pipes open after the child exits

OnLine = Callable[[str], None]


class StoppedError(Exception):
    """``stop`` was set before the command started; nothing ran."""

    def __init__(self, argv: Sequence[str]) -> None:
        """Say which command did not start (its program name, no arguments)."""
        super().__init__(f"{Path(argv[0]).name} was not started: stop was set")
        self.argv = tuple(argv)


@dataclass(frozen=True, slots=True)
class Command:
    """One program to run; ``repr`` leaves out ``env`` and ``stdin``.

    ``env`` is the child's whole environment (None: the operator's). ``stdin`` is written
    to the child's stdin, which is then closed (None: ``/dev/null``). ``timeout`` bounds
    the run in wall-clock seconds (None: no bound); ``grace`` is how long an interrupted
    child may take to exit before it is killed.
    """

    argv: Sequence[str]
    cwd: Path | str | None = None
    env: Mapping[str, str] | None = field(default=None, repr=False)  # may hold secrets
    stdin: str | None = field(default=None, repr=False)  # may be a secret
    timeout: float | None = None
    grace: float = DEFAULT_GRACE


@dataclass(frozen=True, slots=True)
class Completed:
    """How a command ended; ``repr`` leaves out the output texts.

    ``code`` is the exit status (negative: killed by that signal). ``interrupted``: ``stop``
    was set while it ran (it got SIGINT). ``killed``: it was SIGKILLed (after the grace,
    or at the timeout). ``timed_out``: the timeout was reached.
    """

    code: int
    stdout: str = field(repr=False)  # may hold secrets: callers scrub what they show
    stderr: str = field(repr=False)
    interrupted: bool = False
    killed: bool = False
    timed_out: bool = False


@dataclass(frozen=True, slots=True)
class Output:
    """Where a command's output lines go while it runs (both callbacks are optional)."""

    on_stdout: OnLine | None = None
    on_stderr: OnLine | None = None


@dataclass
class _Ending:
    """What happened to a running child, as ``_wait`` saw it."""

    interrupted: bool = False
    killed: bool = False
    timed_out: bool = False


def run(
    command: Command,
    *,
    stop: threading.Event | None = None,
    output: Output | None = None,
    clock: Clock = REAL_CLOCK,
) -> Completed:
    """Run ``command`` to its end (see the module docstring); never raises for an exit code.

    Its timeout and grace are measured on ``clock``. Raises ``StoppedError`` when ``stop``
    is already set, and ``OSError`` when the program cannot be started.
    """
    if stop is not None and stop.is_set():
        raise StoppedError(command.argv)
    started = clock.now()
    callbacks = output or Output()
    # Looked up at call time, so tests can spy on every start.
    proc = subprocess.Popen(
        list(command.argv),
        stdin=subprocess.DEVNULL if command.stdin is None else subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=command.cwd,
        env=command.env,
        encoding="utf-8",
        errors="replace",
        start_new_session=True,
    )
    out: list[str] = []
    err: list[str] = []
    threads = [
        _start_reader(proc.stdout, callbacks.on_stdout, out),
        _start_reader(proc.stderr, callbacks.on_stderr, err),
    ]
    if command.stdin is not None:
        threads.append(_start_feeder(proc.stdin, command.stdin))
    try:
        ending = _wait(proc, command, started, stop, clock)
    finally:
        if proc.poll() is None:  # unwinding: leave nothing behind
            kill_tree(proc.pid)
            proc.wait()
        deadline = clock.now() + _READER_JOIN_SECONDS
        for thread in threads:
            thread.join(max(0.0, deadline - clock.now()))
    return Completed(
        code=proc.returncode,
        stdout="".join(out),
        stderr="".join(err),
        interrupted=ending.interrupted,
        killed=ending.killed,
        timed_out=ending.timed_out,
    )


def _wait(
    proc: subprocess.Popen[str],
    command: Command,
    started: float,
    stop: threading.Event | None,
    clock: Clock,
) -> _Ending:
    """Wait for the child; interrupt it on ``stop``, kill it after the grace or timeout.

    ``started`` was read on ``clock``.
    """
    exit_fd = exit_watch(proc.pid)
    try:
        return _watch(proc, command, started, stop, clock, exit_fd)
    finally:
        if exit_fd is not None:
            os.close(exit_fd)


def _watch(  # noqa: PLR0913 - _wait's arguments and the pidfd it opened
    proc: subprocess.Popen[str],
    command: Command,
    started: float,
    stop: threading.Event | None,
    clock: Clock,
    exit_fd: int | None,
) -> _Ending:
    """``_wait``'s loop, noticing the exit through ``exit_fd`` when there is one."""
    ending = _Ending()
    interrupted_at: float | None = None
    while not _exited(proc, exit_fd):
        now = clock.now()
        if interrupted_at is None and stop is not None and stop.is_set():
            log.info("Interrupting a child process", pid=proc.pid, grace_seconds=command.grace)
            ending.interrupted, interrupted_at = True, now
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
        ending.timed_out = command.timeout is not None and now - started >= command.timeout
        overdue = interrupted_at is not None and now - interrupted_at >= command.grace
        if ending.timed_out or overdue:
            log.warning("Killing a child process and its descendants", pid=proc.pid)
            ending.killed = True
            kill_tree(proc.pid)
            proc.wait()
    return ending


def exit_watch(pid: int) -> int | None:
    """A pidfd of ``pid`` (readable once it exits); None where the kernel has none."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux, a kernel before 5.3, or a sandbox
        return None


def readable(fd: int, timeout: float) -> bool:
    """Whether ``fd`` turns readable within ``timeout`` seconds (poll: any fd number)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout * 1000))


def _exited(proc: subprocess.Popen[str], exit_fd: int | None) -> bool:
    """Whether the child exited (and was reaped) within one poll interval."""
    if exit_fd is not None and not readable(exit_fd, _POLL_SECONDS):
        return proc.poll() is not None  # reaped elsewhere (a kill's wait)
    try:
        proc.wait(timeout=_POLL_SECONDS)
    except subprocess.TimeoutExpired:
        return False
    return True


def _start_reader(
    stream: IO[str] | None, callback: OnLine | None, sink: list[str]
) -> threading.Thread:
    """A thread copying ``stream`` into ``sink`` and each line (without its end) to ``callback``."""

    def read() -> None:
        assert stream is not None  # noqa: S101 - a PIPE
        with stream:
            for line in iter(stream.readline, ""):
                sink.append(line)
                if callback is not None:
                    _call(callback, line.removesuffix("\n"))

    thread = threading.Thread(target=read, name="process-output", daemon=True)
    thread.start()
    return thread


def _call(callback: OnLine, line: str) -> None:
    try:
        callback(line)
    except Exception:  # the pipe must keep draining, or the child blocks
        log.exception("Output callback failed")


def _start_feeder(stream: IO[str] | None, text: str) -> threading.Thread:
    """A thread writing ``text`` to the child's stdin, then closing it."""

    def feed() -> None:
        assert stream is not None  # noqa: S101 - a PIPE
        # The child may exit (or be killed) without reading; its exit code says why.
        with contextlib.suppress(BrokenPipeError, ValueError):
            stream.write(text)
        with contextlib.suppress(BrokenPipeError, ValueError):
            stream.close()

    thread = threading.Thread(target=feed, name="process-input", daemon=True)
    thread.start()
    return thread


def kill_tree(pid: int) -> None:
    """SIGKILL the process group ``pid`` leads and the process groups of all its descendants.

    ``pid`` must be a child of this process that is not yet reaped (so neither its pid nor
    its group id can have been reused) and that leads its own group. The group is stopped
    first, so that it starts nothing new while the tree is read from ``/proc``. This
    process's own group is never signalled.
    """
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGSTOP)
    groups = {pid, *(group for _, group in descendants(pid))} - {os.getpgrp()}
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)


def descendants(root: int) -> list[tuple[int, int]]:
    """``(pid, process group)`` of every descendant of ``root``, from ``/proc`` (Linux)."""
    children: dict[int, list[tuple[int, int]]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # exited, or not a process
        children.setdefault(int(fields[1]), []).append((int(stat.parent.name), int(fields[2])))
    found: list[tuple[int, int]] = []
    pending = [root]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child[0])
    return found
