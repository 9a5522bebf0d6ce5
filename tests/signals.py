"""No test may leave its worker ignoring or blocking SIGINT or SIGTERM.

Role: a pytest plugin (registered by ``tests/conftest.py``). Every process a test starts
inherits its worker's ignored signals and its calling thread's blocked ones: a worker left
ignoring or blocking SIGINT makes every later child deaf to Ctrl-C (a cooperative child
runs on to its end, ``make dev`` never stops), and those later tests fail for a cause that
is not theirs. So each test's closing check compares the worker's state for ``WATCHED``
(ignored, from ``/proc/self/status``; blocked, in the main thread's mask) with the state
before it: a change fails that test, naming the signals, and is undone, so that the next
test starts as the worker started. Handlers a test installs are not checked: a child does
not inherit them (exec resets them to the default action).

Before any test, each process of the run (the controller and every xdist worker) takes
back the default actions of ``WATCHED`` if it inherited them ignored: a job started in the
background of a script, or under ``nohup``, ignores SIGINT, and so would every process
the suite starts; the tests of Ctrl-C (``make dev``, an interrupted CLI) would then fail,
or pass only after an earlier test happened to install a handler in that worker.

Guarantees: reads and restores signal state only; never raises outside the check itself.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

WATCHED = (signal.SIGINT, signal.SIGTERM)


def ignored() -> frozenset[int]:
    """The signals of ``WATCHED`` this process ignores (``SigIgn``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            bits = int(line.split()[1], 16)
            return frozenset(s for s in WATCHED if bits & (1 << (s - 1)))
    return frozenset()


def blocked() -> frozenset[int]:
    """The signals of ``WATCHED`` the calling thread blocks."""
    return frozenset(signal.pthread_sigmask(signal.SIG_BLOCK, [])) & frozenset(WATCHED)


DEFAULTS: dict[int, Callable[[int, FrameType | None], Any] | signal.Handlers] = {
    signal.SIGINT: signal.default_int_handler,
    signal.SIGTERM: signal.SIG_DFL,
}


def pytest_configure(config: pytest.Config) -> None:
    """Take back the default action of each signal of ``WATCHED`` inherited as ignored."""
    del config
    for signum in ignored():
        signal.signal(signum, DEFAULTS[signum])


@pytest.fixture(autouse=True)
def _signals_kept() -> Iterator[None]:
    """Fail (and undo) a test that leaves ``WATCHED`` ignored or blocked (module docstring)."""
    ignored_before, blocked_before = ignored(), blocked()
    handlers = {int(signum): signal.getsignal(signum) for signum in WATCHED}
    yield
    left_ignored, left_blocked = ignored() - ignored_before, blocked() - blocked_before
    for signum in left_ignored:
        signal.signal(signum, handlers[signum])
    if left_blocked:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, left_blocked)
    left = [f"{signal.Signals(s).name} ignored" for s in sorted(left_ignored)]
    left += [f"{signal.Signals(s).name} blocked" for s in sorted(left_blocked)]
    assert not left, (
        f"the test left its worker with {', '.join(left)}: every process started after it "
        "would inherit that; restore the signal's disposition or mask before returning"
    )
