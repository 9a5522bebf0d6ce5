"""``workspace.process.run`` with real child processes (Python one-liners).

No test sleeps to synchronise: a child says it is ready on stdout, and the test acts on
that line in its output callback. A child that waits for something the test must do has
a timeout, so a broken ``run`` fails the test instead of hanging it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from testbed.waits import wait_for
from workspace import process
from workspace.process import Command, Completed, Output, StoppedError, descendants, run

PYTHON = sys.executable
# Prints "ready", then reads the FIFO named by argv[1] to its end (its writer closing it),
# then prints "done" and exits 0.
WAIT_FOR_FIFO = """
import sys
print("ready", flush=True)
with open(sys.argv[1]) as fifo:
    fifo.read()
print("done", flush=True)
"""
# Ignores SIGINT, prints "ready", then waits for a signal that ends it (SIGALRM ends it
# after two minutes, should no test kill it).
STUBBORN = """
import signal
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.alarm(120)
print("ready", flush=True)
while True:
    signal.pause()
"""
# Starts two stubborn grandchildren (one in the child's group, one in a new session),
# prints their pids and "ready", then is stubborn itself.
FAMILY = """
import signal, subprocess, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
stubborn = sys.argv[1]
kids = [
    subprocess.Popen([sys.executable, "-c", stubborn], stdout=subprocess.DEVNULL),
    subprocess.Popen(
        [sys.executable, "-c", stubborn], stdout=subprocess.DEVNULL, start_new_session=True
    ),
]
print(" ".join(str(kid.pid) for kid in kids), flush=True)
print("ready", flush=True)
while True:
    signal.pause()
"""


def python(script: str, *args: str, **fields: Any) -> Command:
    """A command running ``script`` with this interpreter."""
    return Command([PYTHON, "-c", script, *args], **fields)


class Lines:
    """Collects output lines and sets ``stop`` when one equals ``trigger``."""

    def __init__(self, stop: threading.Event | None = None, trigger: str = "ready") -> None:
        """Watch for ``trigger``; set ``stop`` (if given) when it arrives."""
        self.lines: list[str] = []
        self._stop = stop
        self._trigger = trigger

    def __call__(self, line: str) -> None:
        """Record one line."""
        self.lines.append(line)
        if line == self._trigger and self._stop is not None:
            self._stop.set()


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody reaped counts as dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_output_is_streamed_while_the_child_runs(tmp_path: Path) -> None:
    """The callback sees ``ready`` while the child still waits for the test's answer."""
    answer = tmp_path / "answer"
    os.mkfifo(answer)
    seen: list[str] = []

    def on_stdout(line: str) -> None:
        seen.append(line)
        if line == "ready":
            answer.write_text("")  # the child reads to the end, so exits only after this

    result = run(python(WAIT_FOR_FIFO, str(answer), timeout=60), output=Output(on_stdout=on_stdout))

    assert not result.timed_out
    assert (result.code, seen) == (0, ["ready", "done"])
    assert result.stdout == "ready\ndone\n"


def test_exit_code_and_both_streams_are_returned() -> None:
    """A failing child's code, stdout and stderr come back; nothing is raised."""
    script = "import sys; print('out'); print('err 1\\nerr 2', file=sys.stderr); sys.exit(3)"
    errors = Lines()

    result = run(python(script), output=Output(on_stderr=errors))

    assert result == Completed(code=3, stdout="out\n", stderr="err 1\nerr 2\n")
    assert errors.lines == ["err 1", "err 2"]


def test_cwd_env_and_stdin_reach_the_child(tmp_path: Path) -> None:
    """The child runs in ``cwd`` with exactly ``env`` and reads ``stdin``."""
    script = (
        "import os, sys; print(os.getcwd()); print(sorted(os.environ)); print(sys.stdin.read())"
    )

    result = run(python(script, cwd=tmp_path, env={"ONLY": "this"}, stdin="line 1\nline 2"))

    cwd, names, *rest = result.stdout.splitlines()
    assert result.code == 0, result.stderr
    assert cwd == str(tmp_path)
    assert "ONLY" in names
    assert "PATH" not in names
    assert rest == ["line 1", "line 2"]


def test_a_cooperative_child_ends_on_sigint_without_a_kill() -> None:
    """Stop sends SIGINT; a child that exits on it is not killed."""
    stop = threading.Event()
    # Waits for a signal (SIGINT, or the alarm's bound should none come), no fixed sleep.
    script = "import signal\nsignal.alarm(60)\nprint('ready', flush=True)\nsignal.pause()"

    result = run(python(script, grace=60), stop=stop, output=Output(on_stdout=Lines(stop)))

    assert (result.interrupted, result.killed, result.timed_out) == (True, False, False)
    assert result.code != 0
    assert "KeyboardInterrupt" in result.stderr  # Python's SIGINT handler ran


def test_a_stubborn_child_is_killed_after_the_grace() -> None:
    """A child ignoring SIGINT is SIGKILLed once the grace has passed, not before."""
    stop = threading.Event()
    grace = 1.0
    stopped_at: list[float] = []

    def on_stdout(line: str) -> None:
        if line == "ready":
            stopped_at.append(time.monotonic())
            stop.set()

    result = run(python(STUBBORN, grace=grace), stop=stop, output=Output(on_stdout=on_stdout))

    assert (result.interrupted, result.killed, result.timed_out) == (True, True, False)
    assert result.code == -9
    assert time.monotonic() - stopped_at[0] >= grace


def test_grandchildren_die_with_the_child_even_outside_its_group() -> None:
    """The kill reaches a grandchild in the child's group and one in a session of its own."""
    stop = threading.Event()
    lines = Lines(stop)

    result = run(python(FAMILY, STUBBORN, grace=0.5), stop=stop, output=Output(on_stdout=lines))

    assert result.killed
    kids = [int(pid) for pid in lines.lines[0].split()]
    assert len(kids) == 2
    # SIGKILL is asynchronous; it lands within milliseconds.
    wait_for(
        lambda: not any(alive(kid) for kid in kids),
        "the grandchildren to die",
        timeout=10,
        interval=0.01,
    )
    assert [kid for kid in kids if alive(kid)] == []


def test_the_timeout_kills_at_once_without_stop() -> None:
    """A child still running at the timeout is killed with its tree."""
    started = time.monotonic()

    result = run(python(STUBBORN, timeout=0.5, grace=60))

    assert (result.interrupted, result.killed, result.timed_out) == (False, True, True)
    assert result.code == -9
    assert result.stdout == "ready\n"
    assert time.monotonic() - started < 30  # not the grace


def test_stop_before_start_starts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``stop`` already set, ``StoppedError`` is raised and no process is started."""
    started: list[object] = []
    monkeypatch.setattr(subprocess, "Popen", lambda *args, **_: started.append(args))
    stop = threading.Event()
    stop.set()

    with pytest.raises(StoppedError) as stopped:
        run(python("print('never')"), stop=stop)

    assert started == []
    assert stopped.value.argv[0] == PYTHON


def test_a_child_that_never_reads_stdin_can_still_be_stopped() -> None:
    """A large ``stdin`` is fed on a thread: the caller still sees the stop."""
    stop = threading.Event()
    command = python(STUBBORN, stdin="x" * 4_000_000, grace=0.5, timeout=60)

    result = run(command, stop=stop, output=Output(on_stdout=Lines(stop)))

    assert (result.interrupted, result.killed, result.timed_out) == (True, True, False)


def test_a_failing_callback_does_not_stop_the_reading() -> None:
    """Every line is collected even when the callback raises on each one.

    The child writes more than a pipe holds: had the reader died, it would block (and
    time out).
    """
    calls: list[str] = []

    def explode(line: str) -> None:
        calls.append(line)
        raise ValueError(line[:10])

    script = "for n in range(300): print(str(n) * 1000)"
    result = run(python(script, timeout=60), output=Output(on_stdout=explode))

    assert (result.code, result.timed_out) == (0, False)
    assert len(result.stdout) > 256 * 1024
    assert result.stdout.splitlines() == calls
    assert len(calls) == 300


def test_a_missing_program_raises_oserror(tmp_path: Path) -> None:
    """A program that cannot be started raises the ``OSError`` of the start."""
    with pytest.raises(FileNotFoundError):
        run(Command([str(tmp_path / "missing")]))


def test_descendants_lists_the_whole_tree_with_groups() -> None:
    """``descendants`` finds children and grandchildren, each with its process group."""
    stop = threading.Event()
    kids: list[int] = []
    found: dict[int, int] = {}

    def on_stdout(line: str) -> None:
        if line == "ready":
            found.update(descendants(os.getpid()))
            stop.set()
        else:
            kids.extend(int(pid) for pid in line.split())

    run(python(FAMILY, STUBBORN, grace=0.2), stop=stop, output=Output(on_stdout=on_stdout))

    in_group, own_session = kids
    child = found[in_group]  # the child leads the group its first grandchild stays in
    assert found[child] == child
    assert found[own_session] == own_session


def test_reprs_leave_out_what_may_be_secret() -> None:
    """``repr`` of a command shows no env or stdin, of a result no output."""
    script = "import sys; print(sys.stdin.read().upper())"
    command = python(script, env={"TOKEN": "env-value"}, stdin="stdin-value")

    result = run(command)

    assert result.stdout == "STDIN-VALUE\n"
    assert "-value" not in repr(command)
    assert "-VALUE" not in repr(result)


def has_pidfds() -> bool:
    """Whether this kernel opens pidfds (Linux 5.3 and later)."""
    exit_fd = process.exit_watch(os.getpid())
    if exit_fd is None:
        return False
    os.close(exit_fd)
    return True


@pytest.mark.skipif(not has_pidfds(), reason="no pidfd_open here: run falls back to polling")
def test_the_exit_watch_turns_readable_when_the_child_exits(tmp_path: Path) -> None:
    """The pidfd says nothing while the child runs and is readable once it has exited."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    argv = [PYTHON, "-c", WAIT_FOR_FIFO, str(fifo)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as child:
        exit_fd = process.exit_watch(child.pid)
        assert exit_fd is not None
        try:
            assert child.stdout is not None
            assert child.stdout.readline() == "ready\n"
            assert not process.readable(exit_fd, 0)
            with fifo.open("w"):
                pass  # the child reads to the end and exits
            assert process.readable(exit_fd, 60)
            assert child.wait(timeout=60) == 0
        finally:
            os.close(exit_fd)


@pytest.mark.parametrize("way", ["pidfd", "polling"])
def test_a_childs_exit_is_seen_with_or_without_a_pidfd(
    monkeypatch: pytest.MonkeyPatch, way: str
) -> None:
    """Both ways of waiting return the child's code, and each is the one used."""
    if way == "pidfd" and not has_pidfds():
        pytest.skip("no pidfd_open here")
    waited_on: list[int] = []
    real_readable = process.readable

    def spy(fd: int, timeout: float) -> bool:
        waited_on.append(fd)
        return real_readable(fd, timeout)

    monkeypatch.setattr(process, "readable", spy)
    if way == "polling":
        monkeypatch.setattr(process, "exit_watch", lambda _pid: None)
    result = run(python("raise SystemExit(3)"))  # waited on once even when exited
    assert result.code == 3
    assert bool(waited_on) is (way == "pidfd")
