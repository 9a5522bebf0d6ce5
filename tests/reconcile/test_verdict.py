"""The verdicts, table-driven: what each situation writes, posts, requeues and records.

Run outcomes are checked over every ``ErrorKind``, failures so far (0, 1, cap-1, cap,
cap+1), fresh or not, and ``up``/``preview``, and again when the deadline stopped the run;
the expectations are written down per kind in ``KINDS`` (not computed by the code under
test). Conditions are read the way kstatus reads them: Ready's status and reason, and
whether Reconciling and Stalled are present.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import pytest

from controller.clock import FAKE_EPOCH, FakeClock
from reconcile import deletion_verdicts, source_verdicts
from reconcile import verdict as verdicts
from reconcile.policy import NEEDS_A_CHANGE, Policy
from reconcile.spec import StackSpec, parse_spec
from reconcile.verdict import EVENTS, RunFacts, Verdict
from status.conditions import Reason
from status.events import NORMAL, WARNING
from tests.reconcile.fakes import outcome
from workspace.runner import ErrorKind
from workspace.source import SourceFailure

DESTROY_RETRY = deletion_verdicts.DestroyRetry(failures=2, wait=20.0, now=FAKE_EPOCH)

CAP = 3
POLICY = Policy(retry_base_delay=10, max_update_failures=CAP, wait_poll=30)
NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
COMMIT = "0123456789abcdef0123456789abcdef01234567"
POLL = 60.0  # the spec's resync period: a tracked branch is polled that often


def spec(**fields: Any) -> StackSpec:
    """A branch-tracking spec (polled every 60 s) with overrides."""
    base = {"stack": "dev", "projectRepo": "https://git.example/r.git", "branch": "main"}
    return parse_spec({**base, **fields}, "ns")


@dataclasses.dataclass(frozen=True)
class Kind:
    """What a run ending with one ``ErrorKind`` leads to, below the failure cap."""

    ready: str  # Ready's status
    reason_up: str  # Ready's reason after `up`
    reason_preview: str  # ... and after `preview`
    reconciling: str | None  # Reconciling's reason (None: absent)
    stalled: bool
    event_type: str
    requeue: str  # "resync" | "backoff" | "poll" | "wait" | "none"
    label: str  # the update metric's result label
    counts: bool  # counts as a failure (towards the cap)
    capped: bool  # RetriesExhausted at the cap


RETRY = "ProgressingWithRetry"
ROWS: dict[ErrorKind, tuple[Any, ...]] = {
    # kind: ready, reason up, reason preview, Reconciling, stalled, event type, requeue,
    #       metric label, counts as a failure, RetriesExhausted at the cap
    ErrorKind.NONE: (
        "True", "Succeeded", "Succeeded", None, False, NORMAL, "resync", "succeeded", False, False,
    ),
    ErrorKind.UPDATE_FAILED: (
        "False", "UpdateFailed", "PreviewFailed", RETRY, False, WARNING, "backoff", "failed",
        True, True,
    ),
    ErrorKind.SETUP_FAILED: (
        "False", "UpdateFailed", "PreviewFailed", RETRY, False, WARNING, "backoff", "failed",
        True, True,
    ),
    ErrorKind.REFRESH_CHANGES: (
        "False", "RefreshDriftDetected", "RefreshDriftDetected", RETRY, False, WARNING,
        "backoff", "failed", True, True,
    ),
    ErrorKind.CONFLICT: (
        "False", "UpdateConflict", "UpdateConflict", "UpdateConflict", False, NORMAL, "wait",
        "conflict", False, False,
    ),
    ErrorKind.STACK_NOT_FOUND: (
        "False", "StackNotFound", "StackNotFound", None, True, WARNING, "poll", "failed",
        True, False,
    ),
    ErrorKind.PROGRAM_INVALID: (
        "False", "ProgramInvalid", "ProgramInvalid", None, True, WARNING, "poll", "failed",
        True, False,
    ),
    ErrorKind.INTERRUPTED: (
        "False", "Interrupted", "Interrupted", RETRY, False, WARNING, "none", "interrupted",
        True, False,
    ),
    ErrorKind.RUNNER_FAILED: (
        "False", "RunnerFailed", "RunnerFailed", RETRY, False, WARNING, "backoff", "failed",
        True, True,
    ),
    # A source the runner could not lay out is judged from ``Outcome.source`` before this
    # table (``reconcile.run``, as the same failure met before a run); an outcome without
    # one is taken for a transient source failure.
    ErrorKind.SOURCE_FAILED: (
        "False", "SourceUnavailable", "SourceUnavailable", RETRY, False, WARNING, "backoff",
        "failed", True, True,
    ),
    # A registry that did not answer: retried like a failed update.
    ErrorKind.DEPENDENCIES_FAILED: (
        "False", "DependencyInstallFailed", "DependencyInstallFailed", RETRY, False, WARNING,
        "backoff", "failed", True, True,
    ),
    # A lockfile out of step, a version that does not exist: Stalled until a change.
    ErrorKind.DEPENDENCIES_INVALID: (
        "False", "DependencyInstallFailed", "DependencyInstallFailed", None, True, WARNING,
        "poll", "failed", True, False,
    ),
}  # fmt: skip
JUDGED = list(ErrorKind)
"""Every kind is judged (a run left going is ``Detached``, not an outcome)."""
KINDS = {kind: Kind(*row) for kind, row in ROWS.items()}


def kstatus(verdict: Verdict) -> dict[str, tuple[str, str]]:
    """``{type: (status, reason)}`` of the conditions the verdict writes on an empty status."""
    assert verdict.conditions is not None
    status = verdict.conditions.apply({}, 1, NOW)
    assert status["observedGeneration"] == 1
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def judge(
    kind: ErrorKind, previous: int, *, fresh: bool, operation: str, deadline: float | None = None
) -> Verdict:
    """The verdict on a run of ``operation`` that ended with ``kind``."""
    result = outcome(FakeClock(), kind, operation=operation, message="boom")
    facts = RunFacts(result, previous, fresh=fresh, commit=COMMIT, now=NOW, deadline=deadline)
    return verdicts.of_run(facts, spec(), POLICY)


def expected_failures(kind: ErrorKind, previous: int, *, fresh: bool) -> int:
    """The failure count a run ending with ``kind`` records."""
    if kind is ErrorKind.NONE:
        return 0
    if not KINDS[kind].counts:
        return 0 if fresh else previous
    return 1 if fresh else previous + 1


def test_the_table_covers_every_error_kind() -> None:
    """A new ErrorKind must be added to ``KINDS`` (and so be judged on purpose)."""
    assert set(KINDS) == set(JUDGED)


@pytest.mark.parametrize("operation", ["up", "preview"])
@pytest.mark.parametrize("fresh", [True, False], ids=["fresh", "same-inputs"])
@pytest.mark.parametrize("previous", [0, 1, CAP - 1, CAP, CAP + 1])
@pytest.mark.parametrize("kind", JUDGED, ids=str)
def test_run_outcomes(kind: ErrorKind, previous: int, *, fresh: bool, operation: str) -> None:
    """Conditions, Event, requeue, failures and metric label of every run outcome."""
    verdict = judge(kind, previous, fresh=fresh, operation=operation)
    row = KINDS[kind]
    failures = expected_failures(kind, previous, fresh=fresh)
    assert verdict.failures == failures
    assert verdict.update_result == row.label
    assert (verdict.handles_request, verdict.ends_run, verdict.retry_error) == (True, True, None)
    conditions = kstatus(verdict)
    assert verdict.event is not None
    if row.capped and failures >= CAP:
        assert conditions == {
            "Ready": ("False", "RetriesExhausted"),
            "Stalled": ("True", "RetriesExhausted"),
        }
        assert (verdict.event.reason, verdict.event.type_) == ("RetriesExhausted", WARNING)
        assert verdict.requeue_after == POLL
        return
    reason = row.reason_up if operation == "up" else row.reason_preview
    assert conditions["Ready"] == (row.ready, reason)
    assert conditions.get("Reconciling", ("-", None))[1] == row.reconciling
    assert ("Stalled" in conditions) is row.stalled
    if row.stalled:
        assert conditions["Stalled"] == ("True", reason)
    event_reason = "Succeeded" if kind is ErrorKind.NONE else reason
    assert (verdict.event.reason, verdict.event.type_) == (event_reason, row.event_type)
    assert verdict.event.on_change is (kind is ErrorKind.CONFLICT)
    requeues = {
        "resync": POLL,
        "backoff": 10.0 * 2 ** (failures - 1),
        "poll": POLL,
        "wait": POLICY.wait_poll,
        "none": None,
    }
    assert verdict.requeue_after == requeues[row.requeue]


@pytest.mark.parametrize("previous", [0, CAP - 1])
@pytest.mark.parametrize("kind", [k for k in JUDGED if k is not ErrorKind.NONE], ids=str)
def test_a_run_stopped_at_its_deadline_timed_out(kind: ErrorKind, previous: int) -> None:
    """Whatever the runner said, a run the deadline stopped is an UpdateTimedOut failure.

    It counts towards the cap; the metric keeps the runner's own result.
    """
    verdict = judge(kind, previous, fresh=False, operation="up", deadline=600)
    assert verdict.failures == previous + 1
    assert verdict.update_result == KINDS[kind].label
    assert verdict.event is not None
    if previous + 1 >= CAP:
        assert kstatus(verdict)["Stalled"] == ("True", "RetriesExhausted")
        return
    assert kstatus(verdict) == {
        "Ready": ("False", "UpdateTimedOut"),
        "Reconciling": ("True", "ProgressingWithRetry"),
    }
    assert (verdict.event.reason, verdict.event.type_) == ("UpdateTimedOut", WARNING)
    assert "deadline of 600s" in verdict.event.message
    assert verdict.requeue_after == 10.0 * 2**previous


def test_a_run_that_succeeded_at_its_deadline_succeeded() -> None:
    """A run that finished just as the deadline passed is a success."""
    verdict = judge(ErrorKind.NONE, 2, fresh=False, operation="up", deadline=600)
    assert kstatus(verdict) == {"Ready": ("True", "Succeeded")}
    assert verdict.failures == 0


def test_success_messages_name_the_changes_and_the_commit() -> None:
    """Ready says what changed at which commit; the Event what changed."""
    result = outcome(FakeClock(), changes={"create": 2, "same": 1, "delete": 0})
    verdict = verdicts.of_run(
        RunFacts(result, 0, fresh=True, commit=COMMIT, now=NOW), spec(), POLICY
    )
    assert verdict.conditions is not None
    assert verdict.conditions.message == (
        "pulumi up succeeded (create 2, same 1) at commit 0123456"
    )
    assert verdict.event == verdicts.Notice("Succeeded", "pulumi up succeeded (create 2, same 1)")


def test_a_retry_says_when() -> None:
    """Reconciling's message names the attempt and the time of the retry."""
    verdict = judge(ErrorKind.UPDATE_FAILED, 1, fresh=False, operation="up")
    assert verdict.conditions is not None
    assert verdict.conditions.retry_message == (
        "Attempt 2 failed; retrying at 2026-01-01T00:00:20Z"
    )
    assert verdict.conditions.message == "boom"


def test_backoff_is_capped_by_the_spec() -> None:
    """The spec's retryMaxBackoffDurationSeconds caps the requeue of a retry."""
    result = outcome(FakeClock(), ErrorKind.UPDATE_FAILED)
    facts = RunFacts(result, 30, fresh=False, commit=COMMIT, now=NOW)
    capped = verdicts.of_run(facts, spec(retryMaxBackoffDurationSeconds=120), Policy(10, 99))
    assert capped.requeue_after == 120


@pytest.mark.parametrize(
    ("fields", "requeue"),
    [({}, POLL), ({"branch": None, "commit": COMMIT}, None)],
    ids=["branch", "pinned"],
)
def test_stalls_poll_only_a_tracked_branch(fields: dict[str, Any], requeue: float | None) -> None:
    """A stalled run looks again at the next poll of its branch; a pinned commit never."""
    result = outcome(FakeClock(), ErrorKind.PROGRAM_INVALID)
    verdict = verdicts.of_run(
        RunFacts(result, 0, fresh=True, commit=COMMIT, now=NOW), spec(**fields), POLICY
    )
    assert verdict.requeue_after == requeue


@pytest.mark.parametrize(
    ("fields", "requeue"),
    [
        ({}, POLL),
        ({"branch": None, "commit": COMMIT}, None),
        ({"branch": None, "commit": COMMIT, "continueResyncOnCommitMatch": True}, POLL),
    ],
    ids=["branch", "pinned", "pinned-resync"],
)
def test_success_requeues_for_the_next_poll_or_resync(
    fields: dict[str, Any], requeue: float | None
) -> None:
    """After a success: the branch poll, the resync period, or never."""
    result = outcome(FakeClock())
    verdict = verdicts.of_run(
        RunFacts(result, 0, fresh=True, commit=COMMIT, now=NOW), spec(**fields), POLICY
    )
    assert verdict.requeue_after == requeue


# -- before and instead of runs --------------------------------------------------------


@pytest.mark.parametrize(
    ("verdict", "conditions", "event", "requeue"),
    [
        pytest.param(
            verdicts.invalid_spec("bad"),
            {"Ready": ("False", "InvalidSpec"), "Stalled": ("True", "InvalidSpec")},
            ("InvalidSpec", WARNING, True),
            None,
            id="invalid-spec",
        ),
        pytest.param(
            verdicts.suspended(),
            {"Ready": ("Unknown", "Suspended"), "Reconciling": ("True", "Suspended")},
            None,
            None,
            id="suspended",
        ),
        pytest.param(
            verdicts.dependency_not_ready("not yet", POLICY),
            {
                "Ready": ("False", "DependencyNotReady"),
                "Reconciling": ("True", "DependencyNotReady"),
            },
            ("DependencyNotReady", NORMAL, True),
            30.0,
            id="dependency",
        ),
        pytest.param(
            source_verdicts.source_refused(SourceFailure.AUTHENTICATION_FAILED, "no", POLICY),
            {
                "Ready": ("False", "AuthenticationFailed"),
                "Stalled": ("True", "AuthenticationFailed"),
            },
            ("AuthenticationFailed", WARNING, True),
            30.0,
            id="authentication",
        ),
        pytest.param(
            source_verdicts.source_refused(SourceFailure.REVISION_NOT_FOUND, "no", POLICY),
            {
                "Ready": ("False", "SourceUnavailable"),
                "Stalled": ("True", "SourceUnavailable"),
            },
            ("SourceUnavailable", WARNING, True),
            30.0,
            id="revision-not-found",
        ),
        pytest.param(
            verdicts.run_started("preview", COMMIT, 4),
            {"Ready": ("Unknown", "Progressing"), "Reconciling": ("True", "Progressing")},
            ("UpdateStarted", NORMAL, False),
            None,
            id="started",
        ),
        pytest.param(
            deletion_verdicts.destroying("f"),
            {"Ready": ("Unknown", "Destroying"), "Reconciling": ("True", "Destroying")},
            None,
            None,
            id="destroying",
        ),
        pytest.param(
            deletion_verdicts.deletion_blocked("destroy failed: x", "f", DESTROY_RETRY),
            {"Ready": ("False", "DeletionBlocked"), "Reconciling": ("True", "DeletionBlocked")},
            ("DeletionBlocked", WARNING, False),
            20.0,
            id="deletion-blocked",
        ),
    ],
)
def test_verdicts_without_a_run_outcome(
    verdict: Verdict,
    conditions: dict[str, tuple[str, str]],
    event: tuple[str, str, bool] | None,
    requeue: float | None,
) -> None:
    """Conditions, Event (reason, type, only on a change?) and requeue of each situation."""
    assert kstatus(verdict) == conditions
    posted = verdict.event
    assert (posted and (posted.reason, posted.type_, posted.on_change)) == event
    assert verdict.requeue_after == requeue
    assert verdict.handles_request is ("Stalled" in conditions)


def test_the_started_message_names_operation_commit_and_generation() -> None:
    """'Running pulumi <op> at commit <short> (generation <n>)'."""
    verdict = verdicts.run_started("preview", COMMIT, 4)
    assert verdict.conditions is not None
    assert verdict.conditions.message == "Running pulumi preview at commit 0123456 (generation 4)"


def test_a_blocked_deletion_retries_with_backoff_and_says_how_to_give_up() -> None:
    """DeletionBlocked waits for the failures' backoff and names the way out."""
    verdict = deletion_verdicts.deletion_blocked(
        "destroy failed: x", "finalizer.example", DESTROY_RETRY
    )
    assert (verdict.retry_error, verdict.requeue_after, verdict.failures) == (None, 20.0, 2)
    assert verdict.event is not None
    assert "spec.destroyOnFinalize to false" in verdict.event.message
    assert '"finalizer.example"' in verdict.event.message
    assert verdict.conditions is not None
    assert "Attempt 2 failed; retrying at 2026-01-01T00:00:20Z" in verdict.conditions.message
    assert "retrying at" not in verdict.event.message, "one Event text per cause"


@pytest.mark.parametrize(
    ("since", "requeue"),
    [
        (None, 1.0),
        ("2026-01-01T00:00:00Z", 1.0),
        ("2025-12-31T23:59:50Z", 10.0),
        ("2025-01-01T00:00:00Z", 30.0),
    ],
    ids=["just-stalled", "same-second", "ten-seconds", "long-ago"],
)
def test_a_missing_secret_is_looked_for_soon_then_less_often(
    since: str | None, requeue: float
) -> None:
    """The look is repeated after as long as the Stack has been stalled, 1 s to wait_poll."""
    status: dict[str, Any] = {}
    if since is not None:
        stalled = {"type": "Stalled", "status": "True", "reason": "InvalidSpec"}
        status["conditions"] = [{**stalled, "lastTransitionTime": since}]
    verdict = verdicts.secret_not_found("missing", status, NOW, POLICY)
    assert kstatus(verdict)["Stalled"] == ("True", "SecretNotFound")
    assert verdict.requeue_after == requeue


def test_an_unreachable_source_says_the_same_words_at_every_attempt() -> None:
    """Git's timing of each attempt is left out: the retried verdict is written once.

    Each write comes back as a watch event that starts the next pass at once, so a message
    that changed with every attempt would rewrite the status in a loop (status contract
    rule 30).
    """
    said = [
        source_verdicts.source_unreachable(
            "git ls-remote http://h/r.git failed: Failed to connect to h port 80 "
            f"after {ms} ms: Couldn't connect to server",
            say_so=True,
        ).conditions
        for ms in (0, 3012)
    ]
    assert said[0] == said[1]
    assert said[0] is not None
    assert said[0].message.endswith("Failed to connect to h port 80: Couldn't connect to server")
    timed_out = "Operation timed out after 10001 milliseconds with 0 out of 0 bytes received"
    assert source_verdicts.steady(timed_out) == "Operation timed out"


@pytest.mark.parametrize("say_so", [True, False])
def test_an_unreachable_source_is_retried_by_the_queue(*, say_so: bool) -> None:
    """Retry with the queue's backoff; write it only when told to (not over a Ready Stack)."""
    verdict = source_verdicts.source_unreachable("timed out", say_so=say_so)
    assert verdict.retry_error == "source unavailable: timed out"
    assert verdict.event is None
    if not say_so:
        assert verdict.conditions is None
        return
    assert kstatus(verdict) == {
        "Ready": ("False", "SourceUnavailable"),
        "Reconciling": ("True", "ProgressingWithRetry"),
    }


@pytest.mark.parametrize(("fresh", "failures"), [(True, 1), (False, 3)])
def test_a_run_that_could_not_start_counts_as_a_failed_attempt(
    *, fresh: bool, failures: int
) -> None:
    """A stall that ends the announced run and records the attempt."""
    verdict = verdicts.not_started(Reason.INVALID_SPEC, "spec.repoDir: x", 2, fresh=fresh)
    assert kstatus(verdict)["Stalled"] == ("True", "InvalidSpec")
    assert (verdict.failures, verdict.ends_run, verdict.handles_request) == (failures, True, True)


def test_exhausted_says_so_once() -> None:
    """Stalled RetriesExhausted when the status does not say it yet; otherwise nothing."""
    status = {"lastUpdate": {"message": "boom"}}
    first = verdicts.exhausted(status, 60.0)
    assert kstatus(first)["Stalled"] == ("True", "RetriesExhausted")
    assert first.event is not None
    assert first.event.message.endswith("Last error: boom")
    stalled = first.conditions.apply(status, 1, NOW) if first.conditions else {}
    again = verdicts.exhausted(stalled, 60.0)
    assert again == Verdict(requeue_after=60.0)


def test_destroy_verdicts() -> None:
    """A destroy that worked posts Destroyed; one that failed or timed out blocks deletion."""
    clock = FakeClock()
    done = deletion_verdicts.of_destroy(
        outcome(clock, operation="destroy"), None, "f", DESTROY_RETRY
    )
    assert done.conditions is None
    assert done.event is not None
    assert (done.event.reason, done.event.type_, done.update_result) == (
        "Destroyed",
        NORMAL,
        "succeeded",
    )
    failed = outcome(clock, ErrorKind.UPDATE_FAILED, operation="destroy", message="nope")
    blocked = deletion_verdicts.of_destroy(failed, None, "f", DESTROY_RETRY)
    assert kstatus(blocked)["Ready"] == ("False", "DeletionBlocked")
    assert blocked.event is not None
    assert blocked.event.message.startswith("destroy failed: nope. ")
    assert blocked.requeue_after == DESTROY_RETRY.wait
    interrupted = outcome(clock, ErrorKind.INTERRUPTED, operation="destroy")
    late = deletion_verdicts.of_destroy(interrupted, 60.0, "f", DESTROY_RETRY)
    assert late.event is not None
    assert "deadline of 60s" in late.event.message
    assert late.update_result == "interrupted"


def test_every_event_is_warning_exactly_for_failures() -> None:
    """Normal for starting, succeeding, destroying, waiting; Warning for the rest."""
    normal = {
        "UpdateStarted",
        "Succeeded",
        "Destroyed",
        "UpdateConflict",
        "DependencyNotReady",
        "SourceNotReady",
    }
    assert {r for r, t in EVENTS.items() if t == NORMAL} == normal
    assert set(EVENTS.values()) == {NORMAL, WARNING}
    silent = {Reason.PROGRESSING, Reason.PROGRESSING_WITH_RETRY, Reason.SUSPENDED}
    assert set(Reason) - set(EVENTS) == silent | {Reason.DESTROYING}


def test_the_reasons_that_need_a_change() -> None:
    """ProgramInvalid, StackNotFound, a run's InvalidSpec, a bad artifact: no retry mends them.

    A Flux artifact that fails its digest or is unsafe is mended by a new revision only.
    """
    assert {
        Reason.PROGRAM_INVALID,
        Reason.STACK_NOT_FOUND,
        Reason.INVALID_SPEC,
        Reason.ARTIFACT_DIGEST_MISMATCH,
        Reason.ARTIFACT_UNSAFE,
    } == NEEDS_A_CHANGE


def test_an_interruption_nobody_here_asked_for_is_judged_a_runner_failure() -> None:
    """Interrupted while the operator never stopped the run: RunnerFailed, counted, failed."""
    result = outcome(FakeClock(), ErrorKind.INTERRUPTED, message="failed: Evicted")
    facts = RunFacts(result, 1, fresh=False, commit=COMMIT, now=NOW, stopped=False)
    verdict = verdicts.of_run(facts, spec(), POLICY)
    assert verdict.conditions is not None
    assert verdict.conditions.reason is Reason.RUNNER_FAILED
    assert (verdict.failures, verdict.update_result) == (2, "failed")
    assert verdicts.recorded(facts).error is ErrorKind.RUNNER_FAILED
    asked = dataclasses.replace(facts, stopped=True)
    assert verdicts.recorded(asked).error is ErrorKind.INTERRUPTED


def test_every_error_kind_has_a_row_of_the_verdict_table() -> None:
    """No outcome escapes the table: each ``ErrorKind`` a runner may report is judged."""
    assert set(ROWS) == set(ErrorKind)


def test_a_traced_verdicts_event_names_the_trace() -> None:
    """The Event's message ends with the trace id; no trace or no Event: unchanged."""
    started = verdicts.run_started("up", "c" * 40, 3)
    traced = verdicts.with_trace(started, "ab" * 16)
    assert traced.event is not None
    assert started.event is not None
    assert traced.event.message == f"{started.event.message} (trace {'ab' * 16})"
    assert traced.conditions == started.conditions
    assert verdicts.with_trace(started, None) is started
    quiet = dataclasses.replace(started, event=None)
    assert verdicts.with_trace(quiet, "ab" * 16) is quiet
