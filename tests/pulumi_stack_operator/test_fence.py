"""The run pod's fence: the agent stops its own run once its pod is gone or its lease lapsed.

Time is a ``FakeClock``; the API server is a small HTTP server on loopback answering what
each test says; the lease is a real ``LeaseKeeper`` on a lock directory that fails when
told to. Killing processes runs in a child interpreter (whose descendants are its own).
"""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.clock import FakeClock
from pulumi_stack_operator import fence
from pulumi_stack_operator.fence import (
    INTERRUPT_AFTER,
    KILL_AFTER,
    POD_CHECK_SECONDS,
    POD_GONE_AFTER,
    SETTLE_BOUND,
    STOP_BOUND,
    Fence,
    PodPresence,
    version_status,
)
from workspace.runner.lease import LeaseKeeper
from workspace.runner.locks import LEASE_MARGIN, LEASE_SECONDS, StackLocks


@pytest.fixture
def clock() -> FakeClock:
    """Fake time."""
    return FakeClock()


class Answers:
    """What the fake API server answers (one status for every request) and what it was asked."""

    def __init__(self) -> None:
        """Answer 200 until told otherwise."""
        self.status = 200
        self.tokens: list[str] = []


@pytest.fixture
def api_server() -> Iterator[tuple[str, Answers]]:
    """A loopback HTTP server answering ``GET /version`` with ``Answers.status``."""
    answers = Answers()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            answers.tokens.append(self.headers.get("Authorization", ""))
            body = b"{}" if self.path == "/version" else b"no"
            self.send_response(answers.status if self.path == "/version" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            del args

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", answers
    finally:
        server.shutdown()
        server.server_close()


# -- is the pod gone? -----------------------------------------------------------------------


def test_a_pod_is_gone_only_after_refusals_for_the_whole_window(clock: FakeClock) -> None:
    """401 at every answer for POD_GONE_AFTER seconds (two answers at least): gone."""
    presence = PodPresence(lambda: 401, clock)
    presence.observe(401)
    assert not presence.gone()
    clock.step(POD_GONE_AFTER)
    assert not presence.gone(), "one refusal, however old, is not enough"
    presence.observe(401)
    assert presence.gone()


def test_an_accepted_token_ends_a_run_of_refusals(clock: FakeClock) -> None:
    """200 (or 403: authenticated, not allowed) in between: the count starts again."""
    presence = PodPresence(lambda: None, clock)
    for accepted in (200, 403):
        presence.observe(401)
        clock.step(POD_GONE_AFTER - 1)
        presence.observe(accepted)
        clock.step(2)
        presence.observe(401)
        assert not presence.gone()
        clock.step(POD_GONE_AFTER)
        presence.observe(401)
        assert presence.gone()
        presence.observe(200)
        assert not presence.gone()


@pytest.mark.parametrize("silence", [None, 429, 500, 503])
def test_no_answer_or_a_server_error_says_nothing(clock: FakeClock, silence: int | None) -> None:
    """An API server away or failing neither proves the pod gone nor clears refusals."""
    presence = PodPresence(lambda: None, clock)
    for _ in range(10):
        presence.observe(silence)
        clock.step(POD_CHECK_SECONDS)
    assert not presence.gone(), "an API outage must not stop runs"
    presence.observe(401)
    clock.step(POD_GONE_AFTER / 2)
    presence.observe(silence)
    clock.step(POD_GONE_AFTER / 2)
    presence.observe(401)
    assert presence.gone()


def test_the_question_carries_the_pods_token_read_afresh(
    api_server: tuple[str, Answers], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``GET /version`` with the token file's bearer token; its status; no proxy used."""
    url, answers = api_server
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # would refuse: never used
    token = tmp_path / "token"
    token.write_text("first\n")
    assert version_status(url, token, None) == 200
    token.write_text("rotated")
    answers.status = 401
    assert version_status(url, token, None) == 401
    assert answers.tokens == ["Bearer first", "Bearer rotated"]


def test_no_token_or_no_server_is_no_answer(tmp_path: Path) -> None:
    """A missing token file, or nobody listening: None."""
    assert version_status("http://127.0.0.1:9", tmp_path / "missing", None) is None
    token = tmp_path / "token"
    token.write_text("t")
    assert version_status("http://127.0.0.1:9", token, None) is None


def test_outside_a_pod_nothing_is_asked(clock: FakeClock) -> None:
    """Without the in-cluster address (a test, ``make dev``): no presence to ask."""
    assert PodPresence.from_environment({}, clock) is None


def test_the_watch_asks_every_period_on_its_own_thread(
    api_server: tuple[str, Answers], tmp_path: Path, clock: FakeClock
) -> None:
    """``watched()`` asks at once, then every POD_CHECK_SECONDS; refused long enough: gone."""
    url, answers = api_server
    token = tmp_path / "token"
    token.write_text("t")
    answers.status = 401
    presence = PodPresence(lambda: version_status(url, token, None), clock)
    with presence.watched():
        while not presence.gone():
            assert clock.wait_for_waiters()
            clock.step(POD_CHECK_SECONDS)
    assert clock.now() >= POD_GONE_AFTER
    assert len(answers.tokens) >= 3


# -- the fence -------------------------------------------------------------------------------


class Kills:
    """A stand-in for ``kill_children``: counts the calls, kills nothing."""

    def __init__(self) -> None:
        """No call yet."""
        self.calls = 0

    def __call__(self) -> int:
        """One more call; one process group 'killed'."""
        self.calls += 1
        return 1


def failing_keeper(tmp_path: Path, clock: FakeClock) -> LeaseKeeper:
    """A keeper whose backend cannot be listed (every renewal fails)."""
    blocked = tmp_path / "locks"
    blocked.write_text("not a directory")
    return LeaseKeeper(StackLocks((blocked,)), clock)


def test_a_gone_pod_interrupts_the_run_and_says_why(clock: FakeClock) -> None:
    """The pod gone: the stop event is set once, with the reason; nothing killed."""
    stop, kills = threading.Event(), Kills()
    presence = PodPresence(lambda: 401, clock)
    guard = Fence(stop, clock, pod=presence, kill=kills)
    guard.check()
    assert not stop.is_set()
    presence.observe(401)
    clock.step(POD_GONE_AFTER)
    presence.observe(401)
    guard.check()
    assert stop.is_set()
    assert guard.reason is not None
    assert "its pod was deleted" in guard.reason
    assert kills.calls == 0, "a gone pod's CLI gets the interrupt grace to end cleanly"


def test_a_lease_that_cannot_be_renewed_interrupts_then_kills_before_it_runs_out(
    clock: FakeClock, tmp_path: Path
) -> None:
    """Unrenewed INTERRUPT_AFTER s: interrupted; KILL_AFTER s: killed, before LEASE_SECONDS."""
    stop, kills = threading.Event(), Kills()
    keeper = failing_keeper(tmp_path, clock)
    guard = Fence(stop, clock, kill=kills)
    guard.keeper = keeper
    clock.step(INTERRUPT_AFTER - 1)
    guard.check()
    assert not stop.is_set()
    clock.step(1)
    guard.check()
    assert stop.is_set()
    assert "could not be renewed" in (guard.reason or "")
    assert kills.calls == 0
    clock.step(KILL_AFTER - INTERRUPT_AFTER)
    guard.check()
    assert kills.calls == 1
    assert KILL_AFTER < LEASE_SECONDS, "dead before the next run may take the lock"


def test_a_renewed_lease_and_a_present_pod_leave_the_run_alone(
    clock: FakeClock, tmp_path: Path
) -> None:
    """Renewals succeed and the token is taken: nothing stops, however long it runs."""
    stop, kills = threading.Event(), Kills()
    keeper = LeaseKeeper(StackLocks((tmp_path / "locks",)), clock)
    presence = PodPresence(lambda: 200, clock)
    guard = Fence(stop, clock, pod=presence, kill=kills)
    guard.keeper = keeper
    for _ in range(100):
        clock.step(fence.CHECK_SECONDS * 5)
        assert keeper.renew()
        presence.observe(200)
        guard.check()
    assert not stop.is_set()
    assert kills.calls == 0


def test_the_fence_checks_on_its_own_thread_while_watching(
    clock: FakeClock, tmp_path: Path
) -> None:
    """``watching()`` with a keeper kept: a lease that lapses stops the run unaided."""
    stop, kills = threading.Event(), Kills()
    guard = Fence(stop, clock, kill=kills)
    keeper = failing_keeper(tmp_path, clock)
    with guard.watching(), guard.keeping(keeper):
        while kills.calls == 0:
            assert clock.wait_for_waiters(2)  # the fence and the keeper
            clock.step(fence.CHECK_SECONDS)
    assert stop.is_set()
    assert guard.keeper is None


def test_the_next_runs_wait_outlasts_a_lapse_and_a_deleted_pods_stop() -> None:
    """The bound of the next run's wait covers a dead run's lapse and a deleted pod's fence."""
    assert SETTLE_BOUND > LEASE_SECONDS + LEASE_MARGIN
    assert SETTLE_BOUND > STOP_BOUND


KILL_PROBE = """
import subprocess, sys
from pulumi_stack_operator.fence import kill_children
child = subprocess.Popen(["sleep", "600"], start_new_session=True)
killed = kill_children()
print(killed, child.wait())
"""


def test_kill_children_kills_every_group_below_the_agent() -> None:
    """Every descendant's process group is SIGKILLed (here: a child in a session of its own)."""
    done = subprocess.run(
        [sys.executable, "-c", KILL_PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["1", "-9"]
