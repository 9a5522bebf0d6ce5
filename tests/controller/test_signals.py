"""controller.signals: a signal's callback runs outside the handler, so it cannot deadlock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from controller.signals import relay_signals

# The main thread holds the Event's own lock when SIGTERM's handler runs (as it does for a
# few bytecodes at the start and end of Event.wait). A handler that called Event.set
# would wait for that lock for good; the relay's callback runs once the lock is let go.
SCRIPT = textwrap.dedent(
    """
    import os, queue, signal, threading
    from controller.signals import relay_signals

    shutdown = threading.Event()
    got = queue.Queue()

    def callback(signum):
        shutdown.set()
        got.put(signum)

    relay_signals(callback)
    with shutdown._cond:
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, the lock held
        assert not shutdown.is_set()
    assert shutdown.wait(30), "the relay never set the event"
    os.kill(os.getpid(), signal.SIGINT)
    print([got.get(timeout=30), got.get(timeout=30)] == [signal.SIGTERM, signal.SIGINT])
    """
)


def test_a_signal_while_the_event_lock_is_held_still_sets_the_event() -> None:
    """A handler that set the Event itself would hang this process (checked: it does)."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


def test_the_callback_runs_outside_the_main_thread() -> None:
    """Installed from the main thread (pytest's), with a signal no test bed sends."""
    seen: list[tuple[int, str]] = []
    done = threading.Event()
    previous = signal.getsignal(signal.SIGUSR2)

    def callback(signum: int) -> None:
        seen.append((signum, threading.current_thread().name))
        done.set()

    previous_fd = signal.set_wakeup_fd(-1)  # pytest's, if it has one: given back below
    try:
        relay_signals(callback, [signal.SIGUSR2])
        os.kill(os.getpid(), signal.SIGUSR2)
        assert done.wait(30)
    finally:
        signal.set_wakeup_fd(previous_fd)
        signal.signal(signal.SIGUSR2, previous)
    assert seen == [(signal.SIGUSR2, "signals")]


# The kernel may hand a process's SIGTERM to any thread. Here another thread takes it
# (pthread_kill at itself) once the main thread sleeps in Event.wait() without a timeout,
# as the operator's main thread waits for shutdown: Python's handler would only run when
# the main thread next runs bytecode, which nothing brings about. Checked: with handlers
# that write to the pipe themselves, this script hangs until the test's timeout.
ELSEWHERE = textwrap.dedent(
    """
    import os, signal, threading
    from controller.signals import relay_signals

    shutdown = threading.Event()
    relay_signals(lambda signum: shutdown.set())
    main = threading.main_thread().native_id

    def asleep() -> bool:
        with open(f"/proc/self/task/{main}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "S"

    def take_the_signal() -> None:
        while not (shutdown._cond._waiters and asleep()):
            threading.Event().wait(0.01)
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

    threading.Thread(target=take_the_signal).start()
    shutdown.wait()
    print("stopped")
    """
)


def test_a_signal_another_thread_takes_still_reaches_the_callback() -> None:
    """SIGTERM delivered to a worker thread wakes a main thread blocked on a lock."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", ELSEWHERE],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the signal was lost: the main thread never woke")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stopped"


# An operator started with SIGINT ignored (nohup, a shell's background job) would hand that
# on to every CLI it starts; the Pulumi CLI stops a language host with SIGINT and waits 5 s
# before it kills one that ignores it, so each `pulumi up` of a TypeScript or Python
# program would take 5 s longer. Taking SIGINT through the relay gives children the default.
INHERITED = textwrap.dedent(
    """
    import subprocess
    from controller.signals import relay_signals

    relay_signals(lambda signum: None)
    status = subprocess.run(["grep", "^SigIgn:", "/proc/self/status"],
                            capture_output=True, text=True, check=True).stdout
    print(int(status.split()[1], 16))
    """
)


def test_processes_started_after_the_relay_do_not_inherit_an_ignored_sigint() -> None:
    """The operator and the agent relay SIGINT, so their CLIs can be stopped by it."""
    done = subprocess.run(
        [sys.executable, "-c", INHERITED],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert not int(done.stdout.strip()) & (1 << (signal.SIGINT - 1))
