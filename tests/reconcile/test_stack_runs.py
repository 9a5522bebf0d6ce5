"""The Stack reconciler's runs on fakes and a fake clock: every outcome, its retry or stall.

Success, live progress, failures and their backoff, the failure cap, previews, refresh
drift, lock conflicts (waited for, or released when a dead update of ours holds them),
leader takeover, resume after a restart, shutdown and the run deadline.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import structlog

from controller.reconciler import Result
from reconcile.policy import Policy
from reconcile.stack import FINALIZER
from status.conditions import Reason
from status.events import NORMAL, WARNING
from tests.reconcile.fakes import ProgressCallback
from tests.reconcile.stack_harness import KEY, Harness, reaches
from workspace.runner import ErrorKind, Outcome, Progress, UpdateRequest
from workspace.source import SourceError, SourceFailure


@reaches(Reason.PROGRESSING)
def test_a_run_in_flight_reads_progressing_with_live_progress(h: Harness) -> None:
    """During the run: Progressing, currentUpdate, live progress; all gone after it."""
    h.create()
    seen: dict[str, Any] = {}

    def run(
        _request: UpdateRequest, on_progress: ProgressCallback, _stop: threading.Event
    ) -> Outcome:
        seen["started"] = (h.kstatus(), dict(h.status["currentUpdate"]))
        on_progress(Progress("update", 1, 3, 0, "create urn:a"))
        assert h.writer.flush(KEY)
        seen["progress"] = (dict(h.status["progress"]), h.message("Reconciling"))
        on_progress(Progress("update", 2, 3, 0, "create urn:b"))  # pending at the end
        return h.succeed()

    h.runner.then(run)
    h.reconcile()
    kstatus, current = seen["started"]
    assert kstatus == {"Ready": ("Unknown", "Progressing"), "Reconciling": ("True", "Progressing")}
    assert current == {
        "generation": 1,
        "commit": "a1" * 20,
        "type": "up",
        "startTime": "2026-01-01T00:00:00Z",
        "operator": "me_1",
    }
    progress, message = seen["progress"]
    assert (progress["resourcesDone"], progress["current"]) == (1, "create urn:a")
    assert message == "Running pulumi up: update, 1/3 resources done"
    assert h.writer.pending == {}  # the conclusion dropped the pending progress
    assert "progress" not in h.status
    assert "currentUpdate" not in h.status


@reaches(Reason.PROGRESSING_WITH_RETRY)
def test_a_failed_run_is_retried_after_its_backoff(h: Harness) -> None:
    """Ready False UpdateFailed, Reconciling ProgressingWithRetry; retry after 10 s, then 20 s."""
    h.create()
    h.runner.then(h.fail(message="resource failed"))
    assert h.reconcile() == Result(requeue_after=10)
    assert h.kstatus() == {
        "Ready": ("False", "UpdateFailed"),
        "Reconciling": ("True", "ProgressingWithRetry"),
    }
    assert h.message() == "resource failed"
    assert h.message("Reconciling") == "Attempt 1 failed; retrying at 2026-01-01T00:00:10Z"
    assert h.events.posted[-1].reason == "UpdateFailed"
    assert h.events.posted[-1].type_ == WARNING
    assert h.metrics.updates == [("up", "failed")]
    h.clock.step(4)
    assert h.reconcile() == Result(requeue_after=6)  # still backing off: no run
    assert h.runner.operations == ["run"]
    h.clock.step(6)
    h.runner.then(h.fail())
    assert h.reconcile() == Result(requeue_after=20)
    assert h.status["lastUpdate"]["failures"] == 2


@reaches(Reason.UPDATE_FAILED)
def test_failures_count_across_passes_and_reset_on_something_new(h: Harness) -> None:
    """lastUpdate.failures grows per retry; a new commit starts the count again at 1."""
    h.create()
    h.runner.then(h.fail())
    h.reconcile()
    h.clock.step(10)
    h.runner.then(h.fail())
    h.reconcile()
    assert h.status["lastUpdate"]["failures"] == 2
    h.push()
    h.runner.then(h.fail())
    assert h.reconcile() == Result(requeue_after=10)
    assert h.status["lastUpdate"]["failures"] == 1
    assert h.kstatus()["Ready"] == ("False", "UpdateFailed")


@reaches(Reason.RETRIES_EXHAUSTED)
def test_the_failure_cap_stalls_until_something_changes(h: Harness) -> None:
    """At 3 failures: Stalled RetriesExhausted, no more runs; a new commit runs again."""
    h.create()
    for delay in (10, 20):
        h.runner.then(h.fail())
        assert h.reconcile() == Result(requeue_after=delay)
        h.clock.step(delay)
    h.runner.then(h.fail(message="third"))
    assert h.reconcile() == Result(requeue_after=60)
    assert h.kstatus() == {
        "Ready": ("False", "RetriesExhausted"),
        "Stalled": ("True", "RetriesExhausted"),
    }
    assert "up failed 3 times in a row" in h.message()
    assert (h.events.posted[-1].reason, h.events.posted[-1].message) == (
        "RetriesExhausted",
        "third",
    )
    h.clock.step(3600)
    writes = len(h.writer.writes)
    assert h.reconcile() == Result(requeue_after=60)
    assert len(h.writer.writes) == writes
    assert h.runner.operations == ["run"] * 3
    h.push()
    h.runner.then(h.succeed())
    h.reconcile()
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}


def test_a_lowered_cap_stalls_a_stack_that_is_already_past_it(h: Harness) -> None:
    """A status over the cap with no Stalled condition is told so once, without a run."""
    h.create()
    h.runner.then(h.fail())
    h.reconcile()
    h.restart(policy=Policy(retry_base_delay=10, max_update_failures=1, wait_poll=30))
    h.clock.step(3600)
    assert h.reconcile() == Result(requeue_after=60)
    assert h.kstatus()["Stalled"] == ("True", "RetriesExhausted")
    assert h.message().endswith("Last error: it broke")
    assert h.runner.operations == ["run"]
    events = len(h.events.posted)
    h.reconcile()
    assert len(h.events.posted) == events


@reaches(Reason.PREVIEW_FAILED)
def test_a_failed_preview_is_retried_as_a_preview(h: Harness) -> None:
    """spec.preview: the request is a preview; its failure is PreviewFailed."""
    h.create(preview=True)
    h.runner.then(h.fail(operation="preview"))
    assert h.reconcile() == Result(requeue_after=10)
    assert h.runner.calls[0][1].preview
    assert h.kstatus()["Ready"] == ("False", "PreviewFailed")
    assert h.status["lastUpdate"]["type"] == "preview"
    assert h.metrics.updates == [("preview", "failed")]


@reaches(Reason.REFRESH_DRIFT)
def test_refresh_drift_fails_the_run(h: Harness) -> None:
    """expectNoRefreshChanges: drift is RefreshDriftDetected, retried with backoff."""
    h.create(refresh=True, expectNoRefreshChanges=True)
    h.runner.then(h.fail(ErrorKind.REFRESH_CHANGES, message="drift: 1 resource"))
    assert h.reconcile() == Result(requeue_after=10)
    request = h.runner.calls[0][1]
    assert (request.refresh, request.expect_no_refresh_changes) == (True, True)
    assert h.kstatus() == {
        "Ready": ("False", "RefreshDriftDetected"),
        "Reconciling": ("True", "ProgressingWithRetry"),
    }
    assert h.events.posted[-1].reason == "RefreshDriftDetected"


@reaches(Reason.UPDATE_CONFLICT)
def test_a_lock_held_by_another_update_is_waited_for(h: Harness) -> None:
    """UpdateConflict: Ready False, Reconciling True; one Normal Event; not a failure."""
    h.create()
    h.runner.then(h.fail(ErrorKind.CONFLICT, message="locked by ci"))
    assert h.reconcile() == Result(requeue_after=30)
    assert h.kstatus() == {
        "Ready": ("False", "UpdateConflict"),
        "Reconciling": ("True", "UpdateConflict"),
    }
    assert h.message() == "Waiting for another update to finish: locked by ci"
    assert h.status["lastUpdate"]["failures"] == 0
    assert h.metrics.updates == [("up", "conflict")]
    h.clock.step(29)
    assert h.reconcile() == Result(requeue_after=1), "not at the failures' backoff: 10 s"
    h.clock.step(1)
    h.runner.then(h.fail(ErrorKind.CONFLICT, message="locked by ci"))
    h.reconcile()
    conflicts = [e for e in h.events.posted if e.reason == "UpdateConflict"]
    assert [(e.type_, e.message) for e in conflicts] == [(NORMAL, "locked by ci")]
    assert h.runner.operations.count("run") == 2
    assert h.runner.operations.count("clear_stale_lock") == 2


def test_a_stale_lock_of_this_operator_is_cleared_and_the_run_repeated(h: Harness) -> None:
    """CONFLICT on a lock a dead update of ours left: clear it, run again, no conflict shown."""
    h.create()
    h.runner.stale_lock = True
    h.runner.then(h.fail(ErrorKind.CONFLICT), h.succeed())
    assert h.reconcile() == Result(requeue_after=60)
    assert h.runner.operations == ["run", "clear_stale_lock", "run"]
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}
    assert "UpdateConflict" not in h.writer.reasons
    assert h.metrics.updates == [("up", "succeeded")]


def test_an_orphaned_update_is_taken_over_after_the_takeover_delay(tmp_path: Path) -> None:
    """A leader waits for a deposed one's update to stop, then cancels it and runs."""
    h = Harness(tmp_path, sole_runner=True, takeover_delay=20.0, leading_since=lambda: 0.0)
    current = {"generation": 1, "commit": "a1" * 20, "type": "up", "operator": "gone_9"}
    h.create(status={"observedGeneration": 1, "currentUpdate": current})
    h.cluster.objects[KEY]["metadata"]["finalizers"] = [FINALIZER]
    assert h.reconcile() == Result(requeue_after=20)
    assert (h.runner.calls, h.writer.writes) == ([], [])
    h.clock.step(20)
    h.runner.cancellable = True
    h.runner.then(h.fail(ErrorKind.CONFLICT), h.succeed())
    h.reconcile()
    assert h.runner.operations == ["run", "clear_stale_lock", "cancel", "run"]
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}
    # The dead run is concluded as such before the new one starts, never passed off as it.
    assert h.events.reasons == ["Interrupted", "UpdateStarted", "Succeeded"]
    assert "gone_9" in h.events.posted[0].message
    ready = [c["reason"] for w in h.writer.writes for c in w["conditions"] if c["type"] == "Ready"]
    assert ready.index("Interrupted") < ready.index("Progressing")
    assert h.metrics.updates == [("up", "interrupted"), ("up", "succeeded")]
    assert [entry["result"] for entry in h.status["history"]] == ["succeeded", "Interrupted"]


def test_a_run_left_by_a_restart_is_resumed(h: Harness) -> None:
    """A currentUpdate left behind (the operator stopped mid-run): run again, conclude it."""
    last = {"state": "succeeded", "generation": 1, "lastAttemptedCommit": "a1" * 20}
    current = {"generation": 1, "commit": "a1" * 20, "type": "up", "operator": "me_0"}
    h.create(status={"observedGeneration": 1, "lastUpdate": last, "currentUpdate": current})
    h.runner.then(h.succeed())
    h.reconcile()
    assert h.runner.operations == ["run"]  # not orphaned: no leader election
    assert "currentUpdate" not in h.status
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}


@reaches(Reason.INTERRUPTED)
def test_a_shutdown_interrupts_the_run_which_resumes_at_the_next_start(h: Harness) -> None:
    """The operator's stop reaches the runner; Interrupted; the next start runs again."""
    h.create()

    def run(
        _request: UpdateRequest, _on_progress: ProgressCallback, stop: threading.Event
    ) -> Outcome:
        h.stop.set()
        assert stop.wait(10), "the run's stop did not follow the operator's"
        return h.fail(ErrorKind.INTERRUPTED, message="interrupted")

    h.runner.then(run)
    assert h.reconcile() == Result()
    assert h.kstatus() == {
        "Ready": ("False", "Interrupted"),
        "Reconciling": ("True", "ProgressingWithRetry"),
    }
    assert h.status["lastUpdate"]["interrupted"] is True
    assert (h.events.posted[-1].reason, h.events.posted[-1].type_) == ("Interrupted", WARNING)
    assert h.metrics.updates == [("up", "interrupted")]
    h.stop.clear()
    h.runner.then(h.succeed())
    h.reconcile()
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}


@reaches(Reason.UPDATE_TIMED_OUT)
def test_a_run_past_its_deadline_is_stopped_and_retried(h: Harness) -> None:
    """spec.timeoutSeconds on the clock: the run is stopped, UpdateTimedOut, backoff."""
    h.create(timeoutSeconds=600)

    def run(
        _request: UpdateRequest, _on_progress: ProgressCallback, stop: threading.Event
    ) -> Outcome:
        h.clock.step(600)
        assert stop.wait(10), "the deadline did not stop the run"
        return h.fail(ErrorKind.INTERRUPTED, message="interrupted")

    h.runner.then(run)
    assert h.reconcile() == Result(requeue_after=10)
    assert h.kstatus() == {
        "Ready": ("False", "UpdateTimedOut"),
        "Reconciling": ("True", "ProgressingWithRetry"),
    }
    assert "ran longer than its deadline of 600s" in h.message()
    assert h.status["history"][0]["result"] == "UpdateFailed"
    assert h.metrics.updates == [("up", "interrupted")]
    assert not h.stop.is_set()


@reaches(Reason.PROGRAM_INVALID)
def test_an_invalid_program_stalls_until_a_new_commit(h: Harness) -> None:
    """ProgramInvalid stalls at once; no retry on backoff; a push runs again."""
    h.create()
    h.runner.then(h.fail(ErrorKind.PROGRAM_INVALID, message="Pulumi.yaml: no name"))
    assert h.reconcile() == Result(requeue_after=60)
    assert h.kstatus() == {
        "Ready": ("False", "ProgramInvalid"),
        "Stalled": ("True", "ProgramInvalid"),
    }
    assert (h.events.posted[-1].reason, h.events.posted[-1].type_) == ("ProgramInvalid", WARNING)
    h.clock.step(3600)
    h.reconcile()
    assert h.runner.operations == ["run"]
    h.push()
    h.runner.then(h.succeed())
    h.reconcile()
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}


@reaches(Reason.DEPENDENCY_INSTALL_FAILED)
def test_dependencies_that_cannot_install_stall_and_a_registry_outage_is_retried(
    h: Harness,
) -> None:
    """A lockfile out of step stalls until a push; an unreachable registry is retried."""
    h.create()
    h.runner.then(h.fail(ErrorKind.DEPENDENCIES_INVALID, message="npm ci failed: EUSAGE"))
    assert h.reconcile() == Result(requeue_after=60)
    assert h.kstatus() == {
        "Ready": ("False", "DependencyInstallFailed"),
        "Stalled": ("True", "DependencyInstallFailed"),
    }
    warning = h.events.posted[-1]
    assert (warning.reason, warning.type_) == ("DependencyInstallFailed", WARNING)
    h.clock.step(3600)
    h.reconcile()
    assert h.runner.operations == ["run"]  # stalled: no retry on backoff
    h.push()
    h.runner.then(h.fail(ErrorKind.DEPENDENCIES_FAILED, message="npm ci failed: ECONNREFUSED"))
    h.reconcile()
    assert h.kstatus() == {
        "Ready": ("False", "DependencyInstallFailed"),
        "Reconciling": ("True", "ProgressingWithRetry"),
    }
    h.clock.step(3600)
    h.runner.then(h.succeed())
    h.reconcile()
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}


@reaches(Reason.STACK_NOT_FOUND)
def test_a_missing_local_stack_stalls_a_pinned_stack_for_good(h: Harness) -> None:
    """With useLocalStackOnly and no stack: StackNotFound; a pinned commit is never polled."""
    h.create(branch=None, commit="b2" * 20, useLocalStackOnly=True)
    h.runner.then(h.fail(ErrorKind.STACK_NOT_FOUND, message='stack "dev" not found'))
    assert h.reconcile() == Result()
    assert h.runner.calls[0][1].use_local_stack_only
    assert h.kstatus() == {
        "Ready": ("False", "StackNotFound"),
        "Stalled": ("True", "StackNotFound"),
    }
    assert h.source.checkouts[0][1] == "b2" * 20


def test_an_interrupted_run_that_then_cannot_start_is_not_rerun_at_once(h: Harness) -> None:
    """The interrupted mark goes with the failed start: no hot loop, the stall holds.

    Carried over, ``lastUpdate.interrupted`` made every pass run again at once (a fetch
    and an ``UpdateStarted`` each time, past the failure cap).
    """
    h.create(branch=None, commit="b2" * 20)

    def run(
        _request: UpdateRequest, _on_progress: ProgressCallback, stop: threading.Event
    ) -> Outcome:
        h.stop.set()
        assert stop.wait(10), "the run's stop did not follow the operator's"
        return h.fail(ErrorKind.INTERRUPTED, message="interrupted")

    h.runner.then(run)
    h.reconcile()
    h.stop.clear()
    assert h.status["lastUpdate"]["interrupted"] is True
    h.source.checkout_error = SourceError(
        "refused", reason=SourceFailure.AUTHENTICATION_FAILED, transient=False
    )
    h.reconcile()  # resumes the interrupted run, whose checkout is refused
    h.reconcile()
    h.reconcile()
    assert "interrupted" not in h.status["lastUpdate"]
    assert h.kstatus()["Stalled"] == ("True", "AuthenticationFailed")
    assert [e.reason for e in h.events.posted].count("UpdateStarted") == 2


def test_a_run_logs_the_seconds_of_each_leg_at_debug(h: Harness) -> None:
    """Announce, checkout, runner and conclude, on the reconciler's clock."""
    h.create()
    outcome = h.succeed()

    def takes_seven_seconds(*_args: Any) -> Outcome:
        h.clock.step(7)
        return outcome

    h.runner.then(takes_seven_seconds)
    with structlog.testing.capture_logs() as logs:
        h.reconcile()
    [timed] = [e for e in logs if e["event"] == "Run timed"]
    assert timed["log_level"] == "debug"
    assert timed["operation"] == "up"
    legs = {k: v for k, v in timed.items() if k.endswith("_s") and "in_runner" not in k}
    assert set(legs) == {"announce_s", "checkout_s", "runner_s", "conclude_s"}
    assert legs["runner_s"] == 7  # the runner's leg, on the reconciler's clock
    assert legs["announce_s"] == legs["checkout_s"] == legs["conclude_s"] == 0
