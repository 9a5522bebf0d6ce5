"""A warm run pod's inbox: a job handed over is run once; a closed inbox takes nothing."""

from __future__ import annotations

import dataclasses
import io
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from controller.clock import FakeClock, RealClock
from pulumi_stack_operator import agent, warm
from pulumi_stack_operator.agent import AgentJob
from pulumi_stack_operator.warm import Inbox
from testbed.waits import wait_for
from tests.pulumi_stack_operator.test_agent import JOB, environment
from workspace.handover import Delivery
from workspace.runner import ErrorKind, Outcome, failed_outcome
from workspace.runner.channel import JobMark, parse_line

REPO = Path(__file__).resolve().parents[2]


def delivery(mark: str = "t1", operation: str = "up", **config: str) -> Delivery:
    """A delivery of ``JOB`` marked ``mark``, with ``config`` over its own."""
    job = JOB.encode() if not config else _with_config(config)
    return Delivery(mark, operation, job, {})


def _with_config(config: dict[str, str]) -> str:
    return dataclasses.replace(JOB, config={**JOB.config, **config}).encode()


def take(inbox: Inbox, given: Delivery) -> tuple[int, str]:
    """``agent take`` as the operator runs it in the pod: its exit status and stdout."""
    taken = subprocess.run(
        [sys.executable, "-m", "pulumi_stack_operator", "agent", "take"],
        input=given.encode() + "\n",
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PSO_WARM_INBOX": str(inbox.path)},
        check=False,
        timeout=60,
    )
    return taken.returncode, taken.stdout.strip()


def test_the_window_is_a_positive_number_of_seconds() -> None:
    """PSO_KEEP_WARM: unset, zero, negative or not a number is no window."""
    assert warm.keep_warm({"PSO_KEEP_WARM": "30"}) == 30.0
    for value in ("", "0", "-5", "soon"):
        assert warm.keep_warm({"PSO_KEEP_WARM": value}) == 0.0
    assert warm.keep_warm({}) == 0.0


def test_a_taken_job_is_waited_for_once(tmp_path: Path) -> None:
    """Take leaves the job; wait returns it and removes it; a second take meanwhile is refused."""
    inbox = Inbox(tmp_path / "inbox")
    assert inbox.take(delivery("one")) is None
    assert inbox.take(delivery("two")) == "a job is already waiting in the run pod"
    clock = FakeClock()
    assert inbox.wait(threading.Event(), 10, clock) == delivery("one")
    assert not inbox.job_file.exists()


def test_a_window_without_a_job_closes_the_inbox(tmp_path: Path) -> None:
    """Past the window wait returns None and keeps the lock: a later take is refused."""
    inbox = Inbox(tmp_path / "inbox")
    clock = FakeClock()
    assert inbox.wait(threading.Event(), 0, clock) is None
    refused = (warm.REFUSED, "refused: the run pod's agent is ending")
    assert take(inbox, delivery()) == refused
    assert not inbox.job_file.exists()
    while warm.CLOSED:  # held for the process's life in a pod; this test's own is over
        warm.CLOSED.pop().close()


def test_take_hands_a_job_to_an_open_inbox(tmp_path: Path) -> None:
    """``agent take`` (the command the operator runs in the pod): accepted, the job left."""
    inbox = Inbox(tmp_path / "inbox")
    assert take(inbox, delivery("t9")) == (0, warm.ACCEPTED)
    assert Delivery.decode(inbox.job_file.read_text()) == delivery("t9")
    bad = io.StringIO()
    assert warm.take_main(io.StringIO("not json\n"), bad, {"PSO_WARM_INBOX": str(inbox.path)}) == 2
    assert bad.getvalue().startswith("refused: ")


def test_a_stop_ends_the_wait(tmp_path: Path) -> None:
    """SIGTERM (the pod deleted) sets stop: the wait ends at once, with no job."""
    stop = threading.Event()
    stop.set()
    assert Inbox(tmp_path / "inbox").wait(stop, 3600, FakeClock()) is None


class Waiting:
    """``Inbox.wait`` in a thread of its own (a real clock, a long window): what it returned."""

    def __init__(self, inbox: Inbox, stop: threading.Event) -> None:
        """Start waiting on ``inbox`` until a job comes or ``stop`` is set."""
        self.got: list[Delivery | None] = []
        self.thread = threading.Thread(
            target=lambda: self.got.append(inbox.wait(stop, 3600, RealClock())), daemon=True
        )
        self.thread.start()
        wait_for(lambda: _held_open(inbox.path / warm.BELL), "the bell held open", timeout=10)

    def result(self) -> Delivery | None:
        """What the wait returned (fails after 10 s: it did not wake)."""
        self.thread.join(10)
        assert not self.thread.is_alive(), "the waiting agent did not wake"
        return self.got[0]


def _held_open(bell: Path) -> bool:
    """Whether someone reads ``bell``: a writer may open a FIFO without waiting only then."""
    try:
        os.close(os.open(bell, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        return False
    return True


@pytest.fixture
def slow_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    """A poll far longer than any test's wait: only the bell can wake the agent in time."""
    monkeypatch.setattr(warm, "POLL", 600.0)


@pytest.mark.usefixtures("slow_poll")
def test_a_take_rings_the_bell_and_the_waiting_agent_looks_at_once(tmp_path: Path) -> None:
    """The job reaches the agent without its poll: the take rang once it let go of the lock."""
    inbox = Inbox(tmp_path / "inbox")
    waiting = Waiting(inbox, threading.Event())
    assert take(inbox, delivery("rung")) == (0, warm.ACCEPTED)
    assert waiting.result() == delivery("rung")


@pytest.mark.usefixtures("slow_poll")
def test_a_stop_that_rings_ends_the_wait_at_once(tmp_path: Path) -> None:
    """The agent's signal relay sets stop and rings: the dozing agent ends, no job."""
    inbox, stop = Inbox(tmp_path / "inbox"), threading.Event()
    waiting = Waiting(inbox, stop)
    stop.set()
    inbox.ring()
    assert waiting.result() is None


def test_ringing_with_nobody_waiting_does_nothing(tmp_path: Path) -> None:
    """No inbox, or no reader on its bell (between runs): the take's ring is dropped."""
    inbox = Inbox(tmp_path / "inbox")
    inbox.ring()  # no directory yet
    inbox.path.mkdir()
    os.mkfifo(inbox.path / warm.BELL)
    inbox.ring()  # a bell nobody holds open
    assert inbox.take(delivery("later")) is None
    assert inbox.wait(threading.Event(), 10, FakeClock()) == delivery("later")


def test_a_bell_that_is_not_a_fifo_leaves_the_poll(tmp_path: Path) -> None:
    """A plain file in the bell's place is never waited on (it would always read ready)."""
    inbox = Inbox(tmp_path / "inbox")
    inbox.path.mkdir()
    (inbox.path / warm.BELL).write_text("")
    with inbox._bell() as bell:  # noqa: SLF001 - the fallback itself
        assert bell is None
    assert inbox.take(delivery("polled")) is None
    assert inbox.wait(threading.Event(), 10, FakeClock()) == delivery("polled")


def test_a_warm_agent_runs_each_job_handed_over_after_its_mark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """serve_warm: mark, checkout, run, outcome for each job; the workspace emptied first."""
    ran: list[tuple[str, dict[str, str]]] = []
    workspace = tmp_path / "workspace"
    monkeypatch.setattr(agent, "SOURCE", workspace / "source")
    monkeypatch.setattr(agent, "CHECKOUT_FAILED", workspace / "checkout-failed")
    monkeypatch.setattr(agent, "CHECKOUT_SECONDS", workspace / "checkout-seconds")

    def checked_out(job: AgentJob) -> None:
        (workspace / "source").mkdir(parents=True)  # fails if the last one was left
        (workspace / "source" / "from").write_text(job.operation)

    def operated(job: AgentJob, *_: object) -> Outcome:
        ran.append((job.operation, dict(job.document.config)))
        assert (workspace / "source" / "from").read_text() == job.operation
        now = agent.CLOCK.wall()
        return failed_outcome(job.operation, ErrorKind.NONE, "", now, now)

    monkeypatch.setattr(agent, "check_out", checked_out)
    monkeypatch.setattr(agent, "run", operated)
    (workspace / "source").mkdir(parents=True)  # the first job's checkout
    inbox = Inbox(tmp_path / "inbox")
    inbox.take(delivery("first", "preview", content="two"))
    stop = threading.Event()
    environ = environment(PSO_WARM_INBOX=str(inbox.path))
    printed = Printed()
    monkeypatch.setattr(sys, "stdout", printed)
    server = threading.Thread(target=agent.serve_warm, args=(environ, stop, 30.0))
    server.start()
    try:
        printed.wait_for(2)
        assert inbox.take(delivery("second", "destroy")) is None
        printed.wait_for(4)
    finally:
        stop.set()
        server.join(10)
    reports = [parse_line(line) for line in printed.lines]
    assert reports[0] == JobMark("first")
    assert isinstance(reports[1], Outcome)
    assert reports[1].operation == "preview"
    assert reports[2] == JobMark("second")
    assert isinstance(reports[3], Outcome)
    assert reports[3].operation == "destroy"
    assert ran == [("preview", {**JOB.config, "content": "two"}), ("destroy", dict(JOB.config))]


class Printed(io.TextIOBase):
    """A stdout that keeps the lines printed on it, from any thread, none lost.

    Reading a captured file descriptor while another thread prints can lose a line (the
    capture is read, then truncated); lines kept as they are written cannot be.
    """

    def __init__(self) -> None:
        """No lines yet."""
        self._lock = threading.Lock()
        self._text = ""

    def write(self, text: str) -> int:
        """Keep ``text``."""
        with self._lock:
            self._text += text
        return len(text)

    @property
    def lines(self) -> list[str]:
        """The non-blank lines printed so far."""
        with self._lock:
            return [line for line in self._text.splitlines() if line.strip()]

    def wait_for(self, count: int) -> None:
        """Return once ``count`` lines have come (fail after 10 s)."""
        wait_for(
            lambda: len(self.lines) >= count, f"{count} report lines", timeout=10, interval=0.05
        )


NOT_THE_TAKES = ("structlog", "asyncio", "kubernetes", "workspace.runner.pod", "controller.logs")
"""What ``agent take`` never loads: it runs in the handover's critical path, once per run."""


def test_the_take_starts_without_logging_or_the_operators_modules(tmp_path: Path) -> None:
    """The entry point as the operator's exec starts it (``agent take``): only the inbox."""
    probe = (
        "import sys\n"
        "from pulumi_stack_operator import warm\n"
        f"warm.take_main = lambda *a: print(sorted(m for m in {NOT_THE_TAKES!r} "
        "if m in sys.modules)) or 0\n"
        "from pulumi_stack_operator.__main__ import main\n"
        "sys.exit(main(['agent', 'take']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PSO_WARM_INBOX": str(tmp_path)},
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "[]"
