"""The status rules (``tests.status.status_rules``): our statuses keep them; each can fail.

Every status below is made by the real functions of ``status.conditions``; kstatus and Argo
CD verdicts come from the ports in ``tests.status``. The situations are the rows of the
Conditions table (``docs/status.md``); hand-made violations start from such a status and
break one thing, so that each rule is shown to be able to fail.
"""

from __future__ import annotations

import datetime
import itertools
from typing import Any

import pytest

from status import conditions as c
from status.conditions import Reason
from testbed import kstatus
from testbed.kstatus import KStatus
from tests.status import argo_health
from tests.status.argo_health import HealthStatus
from tests.status.status_rules import Violation, check, check_final
from tests.status.witness_fixtures import (
    BLOCKED,
    CRD_DEFAULT,
    CURRENT,
    DEGRADED,
    DESTROYING,
    DONE,
    FAILED,
    HEALTHY,
    IN_PROGRESS,
    NAMESPACE,
    PROGRESSING,
    PULUMI_REQUEST,
    SPEC2,
    STALL_REASONS,
    START,
    T0,
    T1,
    T2,
    T3,
    TERMINATING,
    Status,
    concluded,
    condition,
    edit,
    retrying,
    running,
    stack,
    stalled,
    strip,
    waiting,
    without,
)

# -- the situations of the Conditions table (docs/status.md) -------------------------------


def restamped(status: dict[str, Any], generation: int) -> dict[str, Any]:
    """``status`` claiming ``generation`` everywhere without a run for it (what not to do)."""
    conditions = [{**x, "observedGeneration": generation} for x in status["conditions"]]
    return {**status, "observedGeneration": generation, "conditions": conditions}


@pytest.mark.parametrize(
    ("obj", "expected_kstatus", "expected_argo", "final"),
    [
        pytest.param(stack(START), IN_PROGRESS, PROGRESSING, False, id="first-seen"),
        pytest.param(
            stack(DONE, generation=2, spec={"stack": "dev", "branch": "next"}),
            IN_PROGRESS, PROGRESSING, False, id="new-generation-not-yet-observed",
        ),
        pytest.param(
            stack(running(c.progressing(DONE, 2, "Running pulumi up (generation 2)", T2), 2),
                  generation=2),
            IN_PROGRESS, PROGRESSING, False, id="new-generation",
        ),
        pytest.param(
            stack(running(c.progressing(DONE, 1, "Running pulumi up at commit 4567def", T2))),
            IN_PROGRESS, PROGRESSING, False, id="new-commit",
        ),
        pytest.param(
            stack(running(c.progressing(DONE, 1, "Running pulumi up (request r1)", T2)),
                  annotations={PULUMI_REQUEST: "r1"}),
            IN_PROGRESS, PROGRESSING, False, id="reconcile-requested",
        ),
        pytest.param(
            stack(running(c.progressing(START, 1, "Running pulumi up: update, 2/5 done", T1))),
            IN_PROGRESS, PROGRESSING, False, id="update-running",
        ),
        pytest.param(stack(DONE), CURRENT, HEALTHY, True, id="succeeded"),
        *(
            pytest.param(
                stack(retrying(reason, f"error: {reason} because the disk is on fire")),
                IN_PROGRESS, PROGRESSING, True, id=f"failed-will-retry-{reason}",
            )
            for reason in (Reason.UPDATE_FAILED, Reason.PREVIEW_FAILED, Reason.REFRESH_DRIFT)
        ),
        pytest.param(
            stack(retrying(Reason.INTERRUPTED, "Interrupted by an operator shutdown",
                           "Interrupted by an operator shutdown")),
            IN_PROGRESS, PROGRESSING, True, id="interrupted-by-shutdown",
        ),
        pytest.param(
            stack(waiting(Reason.DEPENDENCY_NOT_READY, 'Prerequisite Stack "first" is not Ready')),
            IN_PROGRESS, PROGRESSING, True, id="waiting-for-a-prerequisite",
        ),
        pytest.param(
            stack(waiting(Reason.UPDATE_CONFLICT, "Waiting for another update to finish")),
            IN_PROGRESS, PROGRESSING, True, id="waiting-for-a-lock",
        ),
        pytest.param(
            stack(waiting(Reason.UPDATE_CONFLICT, "Waiting for another update", ready="Unknown")),
            IN_PROGRESS, PROGRESSING, True, id="waiting-for-a-lock-ready-unknown",
        ),
        *(
            pytest.param(
                stack(stalled(reason, f"{reason}: the user must change something")),
                FAILED, DEGRADED, True, id=f"needs-a-change-{reason}",
            )
            for reason in STALL_REASONS
        ),
        pytest.param(
            stack(c.deleting(DONE, 1, Reason.DESTROYING, DESTROYING, T2), deleting=True),
            TERMINATING, PROGRESSING, True, id="being-deleted-destroying",
        ),
        pytest.param(
            stack(c.deleting(DONE, 1, Reason.DELETION_BLOCKED, BLOCKED, T2, ready="False"),
                  deleting=True),
            TERMINATING, PROGRESSING, True, id="being-deleted-blocked",
        ),
    ],
)  # fmt: skip
def test_each_situation_reads_as_intended_and_breaks_no_rule(
    obj: dict[str, Any], expected_kstatus: KStatus, expected_argo: HealthStatus, *, final: bool
) -> None:
    """Each situation, built with status.conditions, gets its kstatus and Argo verdict.

    Status contract rule 18; the situations are the rows of the Conditions table.
    """
    assert kstatus.read_status(obj).status is expected_kstatus
    assert argo_health.health(obj).status is expected_argo
    assert check(obj, final=final) == []


def test_a_whole_life_breaks_no_rule_between_writes() -> None:
    """Create, fail, retry, succeed, edit, stall, request, succeed, delete: each step is clean."""
    spec2, asked = {"stack": "dev", "branch": "main", "refresh": True}, {PULUMI_REQUEST: "r1"}

    def gen2(status: Status | None, rv: str, **extra: Any) -> dict[str, Any]:
        return stack(status, rv=rv, generation=2, spec=spec2, **extra)

    retry = retrying(Reason.UPDATE_FAILED, "error: disk on fire")
    rerun = running(c.progressing(retry, 1, "Running pulumi up (retry)", T2))
    done1 = concluded(c.succeeded(rerun, 1, "pulumi up succeeded", T2))
    run2 = running(c.progressing(done1, 2, "Running pulumi up (generation 2)", T3), 2)
    stall2 = concluded(c.stalled(run2, 2, Reason.PROGRAM_INVALID, "Pulumi.yaml: bad", T3), 2)
    run3 = running(c.progressing(stall2, 2, "Running pulumi up (request r1)", T3), 2)
    done2 = concluded(c.succeeded(run3, 2, "pulumi up succeeded", T3), 2)
    done2 |= {"observedReconcileRequest": "r1", "lastHandledReconcileAt": "r1"}
    destroying = c.deleting(done2, 2, Reason.DESTROYING, DESTROYING, T3)
    blocked = c.deleting(destroying, 2, Reason.DELETION_BLOCKED, BLOCKED, T3, ready="False")
    life = [  # (version, whether it is a settled state)
        (stack(), False),
        (stack(START, rv="2"), False),
        (stack(running(c.progressing(START, 1, "Running: 1/2 done", T0)), rv="3"), False),
        (stack(retry, rv="4"), True),
        (stack(rerun, rv="5"), False),
        (stack(done1, rv="6"), True),
        (gen2(done1, "7"), False),
        (gen2(run2, "8"), False),
        (gen2(stall2, "9"), True),
        (gen2(stall2, "10", annotations=asked), False),
        (gen2(run3, "11", annotations=asked), False),
        (gen2(done2, "12", annotations=asked), True),
        (gen2(done2, "13", annotations=asked, deleting=True), True),
        (gen2(destroying, "14", annotations=asked, deleting=True), True),
        (gen2(blocked, "15", annotations=asked, deleting=True), True),
    ]
    for (before, _), (after, settled) in itertools.pairwise(life):
        found = check(after, before, final=settled)
        assert found == [], [str(v) for v in found]


# -- each rule can fail ----------------------------------------------------------------------


def rules(found: list[Violation]) -> set[int]:
    """The rule ids in ``found``."""
    return {v.rule for v in found}


BAD_TYPE = condition("not a type", "True", "Fine")
RUN2 = running(c.progressing(DONE, 2, "Running pulumi up (generation 2)", T2), 2)
# The operator concludes generation 2's run but reports generation 1: a lie
# (status contract rule 5).
STALE_STALL = concluded(c.stalled(RUN2, 1, Reason.INVALID_SPEC, "bad", T2), state="failed")


def retry_flipped_at(time_: str) -> Status:
    """A failed attempt whose Ready flipped to False at ``time_``."""
    return edit(retrying(Reason.UPDATE_FAILED, "error: disk on fire"), "Ready",
                lastTransitionTime=time_)  # fmt: skip


def rerun_at(status: Status, now: datetime.datetime = T1) -> Status:
    """The retry starting: Ready flips False -> Unknown, stamped ``now`` (12:01:00)."""
    return running(c.progressing(status, 1, "Running pulumi up (retry)", now))


LONG = "x" * 32769
WITH_SUSPEND = {"stack": "dev", "branch": "main", "suspend": True}


@pytest.mark.parametrize(
    ("obj", "previous", "final", "expected"),
    [
        pytest.param(stack({"observedGeneration": 1, "conditions": []}), None, False, {1},
                     id="rule1-status-without-ready"),
        pytest.param(stack({k: v for k, v in DONE.items() if k != "observedGeneration"}), None,
                     False, {1}, id="rule1-status-without-observed-generation"),
        pytest.param(stack(DONE, rv="2"), stack(), False, {1}, id="rule1-first-write-is-ready"),
        pytest.param(stack(DONE, rv="2"), stack(CRD_DEFAULT), False, {1},
                     id="rule1-first-write-after-the-crd-default-is-ready"),
        pytest.param(stack(CRD_DEFAULT), None, True, {1, 18},
                     id="rule1-final-with-only-the-crd-default"),
        pytest.param(stack(), None, True, {1, 18}, id="rule1-final-without-status"),
        pytest.param(stack({**DONE, "observedGeneration": "1"}), None, False, {2},
                     id="rule2-observed-generation-is-a-string"),
        pytest.param(stack({**DONE, "observedGeneration": 3}), None, False, {2},
                     id="rule2-observed-generation-ahead"),
        pytest.param(stack(edit(DONE, "Ready", observedGeneration=2)), None, False, {2},
                     id="rule2-condition-generation-ahead"),
        pytest.param(stack(DONE, generation=2), None, True, {3, 18},
                     id="rule3-ready-for-an-older-generation"),
        pytest.param(stack(restamped(DONE, 2), generation=2), None, True, {3},
                     id="rule3-ready-but-last-update-ran-another-generation"),
        pytest.param(stack(strip(DONE, "Ready", "observedGeneration")), None, True,
                     {3}, id="rule3-condition-without-observed-generation"),
        pytest.param(stack({**START, "conditions": [condition("Stalled", "True", "InvalidSpec"),
                                                    *START["conditions"]]}),
                     None, False, {4, 5}, id="rule4-reconciling-and-stalled"),
        pytest.param(stack(stalled(Reason.INVALID_SPEC, "bad"), generation=2), None, False,
                     {5}, id="rule5-stalled-for-an-older-generation"),
        pytest.param(stack(STALE_STALL, rv="2", generation=2, spec=SPEC2),
                     stack(RUN2, generation=2, spec=SPEC2), False, {5},
                     id="rule5-operator-writes-stalled-for-an-older-generation"),
        pytest.param(stack(edit(stalled(Reason.INVALID_SPEC, "bad"), "Ready", status="Unknown")),
                     None, False, {5, 6}, id="rule5-stalled-with-ready-unknown"),
        pytest.param(stack(without(START, "Reconciling")), None, False, {6},
                     id="rule6-ready-unknown-without-reconciling"),
        pytest.param(stack({**DONE, "conditions": [
                         condition("Reconciling", "True", "ProgressingWithRetry"),
                         *DONE["conditions"]]}),
                     None, True, {6, 8}, id="rule6-final-reconciling-and-ready"),
        pytest.param(stack({**DONE, "conditions": [condition("Reconciling", "False", "Done"),
                                                   *DONE["conditions"]]}),
                     None, False, {7}, id="rule7-reconciling-false"),
        pytest.param(stack({**retrying(Reason.UPDATE_FAILED, "e"), "conditions": [
                         condition("Stalled", "False", "Fine"),
                         *retrying(Reason.UPDATE_FAILED, "e")["conditions"]]}),
                     None, False, {4, 7}, id="rule7-stalled-false"),
        pytest.param(stack(edit(stalled(Reason.INVALID_SPEC, "bad"), "Ready",
                                reason="UpdateFailed")),
                     None, True, {8}, id="rule8-ready-does-not-carry-stalled-reason"),
        pytest.param(stack(edit(waiting(Reason.DEPENDENCY_NOT_READY, "first"), "Ready",
                                reason="UpdateFailed")),
                     None, True, {8}, id="rule8-ready-does-not-carry-reconciling-reason"),
        pytest.param(stack(retrying(Reason.UPDATE_FAILED, "2 update failure(s)")), None, True,
                     {9}, id="rule9-ready-false-with-a-bare-count"),
        pytest.param(stack(retrying(Reason.UPDATE_FAILED, "")), None, True, {9},
                     id="rule9-ready-false-without-a-message"),
        pytest.param(stack(edit(DONE, "Ready", lastTransitionTime="2026-01-01T12:05:00Z"), rv="2"),
                     stack(DONE), False, {10, 13}, id="rule10-time-moved-status-unchanged"),
        pytest.param(stack(concluded(c.succeeded(retrying(Reason.UPDATE_FAILED, "e"), 1, "ok",
                                                 T0)), rv="2"),
                     stack(retrying(Reason.UPDATE_FAILED, "e")), False, {10},
                     id="rule10-time-went-back"),
        pytest.param(stack(edit(DONE, "Ready", lastTransitionTime="2026-01-01T12:01:01Z"), rv="2"),
                     stack(DONE), False, {10, 13},
                     id="rule10-time-moved-one-second-status-unchanged"),
        pytest.param(stack(rerun_at(retry_flipped_at("2026-01-01T12:01:02Z")), rv="2"),
                     stack(retry_flipped_at("2026-01-01T12:01:02Z")), False, {10},
                     id="rule10-flip-went-back-two-seconds"),
        pytest.param(stack(edit(DONE, "Ready", lastTransitionTime="2026-01-01T13:01:00+01:00")),
                     None, False, {10}, id="rule10-time-not-utc"),
        pytest.param(stack({**DONE, "conditions": [*DONE["conditions"], BAD_TYPE]}), None,
                     False, {11}, id="rule11-type-not-a-qualified-name"),
        pytest.param(stack({**DONE, "conditions": [*DONE["conditions"],
                                                   condition("Synced", "Maybe", "Fine")]}),
                     None, False, {11}, id="rule11-status-not-in-enum"),
        pytest.param(stack(edit(DONE, "Ready", reason="Update-Failed")), None, False, {11},
                     id="rule11-reason-pattern"),
        pytest.param(stack(edit(DONE, "Ready", reason="R" * 1025)), None, False, {11},
                     id="rule11-reason-too-long"),
        pytest.param(stack(edit(DONE, "Ready", message=LONG)), None, False, {11},
                     id="rule11-message-too-long"),
        pytest.param(stack(strip(DONE, "Ready", "message")), None, False, {11},
                     id="rule11-message-missing"),
        pytest.param(stack(edit(DONE, "Ready", lastTransitionTime="yesterday")), None, False,
                     {11}, id="rule11-time-not-rfc3339"),
        pytest.param(stack({**DONE, "conditions": DONE["conditions"] * 2}), None, False,
                     {11}, id="rule11-duplicate-type"),
        pytest.param(stack({**DONE, "conditions": {"Ready": "True"}}), None, False,
                     {1, 11}, id="rule11-conditions-not-a-list"),
        pytest.param(stack({**DONE, "conditions": [*DONE["conditions"], "Ready"]}), None,
                     False, {11}, id="rule11-condition-not-an-object"),
        pytest.param(stack({**START, "conditions": START["conditions"][::-1]}), None, False,
                     {12}, id="rule12-ready-before-reconciling"),
        pytest.param(stack({**DONE, "lastUpdate": {**DONE["lastUpdate"],
                                                   "lastResyncTime": "2026-01-01T12:09:00Z"}},
                           rv="2"),
                     stack({**DONE, "lastUpdate": {**DONE["lastUpdate"],
                                                   "lastResyncTime": "2026-01-01T12:01:00Z"}}),
                     False, {13}, id="rule13-idle-heartbeat-write"),
        pytest.param(stack(DONE, generation=2, rv="2"), stack(DONE), False, {14},
                     id="rule14-generation-bumped-without-a-spec-change"),
        pytest.param(stack(c.succeeded(DONE, 2, "ok", T1), generation=2, rv="2"),
                     stack(c.succeeded(DONE, 2, "ok", T1), generation=3,
                           spec={"stack": "dev", "branch": "x"}),
                     False, {14}, id="rule14-generation-went-back"),
        pytest.param(stack({k: v for k, v in START.items() if k != "currentUpdate"}, rv="2"),
                     stack(START), False, {15}, id="rule15-run-ended-but-still-progressing"),
        pytest.param(stack({k: v for k, v in START.items() if k != "currentUpdate"}), None,
                     True, {15}, id="rule15-final-progressing-without-a-run"),
        pytest.param(stack(edit(DONE, "Ready", message="still here"), rv="2", deleting=True),
                     stack(DONE, deleting=True), False, {16},
                     id="rule16-deletion-write-without-a-step"),
        pytest.param(stack(c.deleting(DONE, 1, Reason.DESTROYING, "", T2), rv="2", deleting=True),
                     stack(DONE, deleting=True), False, {16},
                     id="rule16-deletion-step-without-a-message"),
        pytest.param(stack({**DONE, "observedReconcileRequest": "r1",
                            "lastHandledReconcileAt": "r2"}),
                     None, False, {17}, id="rule17-handshake-fields-disagree"),
        pytest.param(stack({**running(c.progressing(DONE, 1, "Running", T2)),
                            "observedReconcileRequest": "r1", "lastHandledReconcileAt": "r1"},
                           rv="2", annotations={PULUMI_REQUEST: "r1"}),
                     stack(DONE, annotations={PULUMI_REQUEST: "r1"}), False, {17},
                     id="rule17-handled-before-the-run-concluded"),
        pytest.param(stack({**DONE, "observedReconcileRequest": "r1",
                            "lastHandledReconcileAt": "r1"},
                           annotations={PULUMI_REQUEST: "r2"}),
                     None, True, {17}, id="rule17-final-request-not-handled"),
        pytest.param(stack(edit(DONE, "Ready", status="False", reason="UpdateFailed")), None,
                     True, {18}, id="rule18-nothing-decided-and-nobody-working"),
        pytest.param(stack({**DONE, "conditions": [
                         *DONE["conditions"],
                         condition("Reconciling", "True", "ProgressingWithRetry")]}),
                     None, True, {6, 8, 12, 18},
                     id="rule18-argo-healthy-while-reconciling"),
    ],
)  # fmt: skip
def test_each_rule_catches_a_hand_made_violation(
    obj: dict[str, Any], previous: dict[str, Any] | None, *, final: bool, expected: set[int]
) -> None:
    """A status broken in one way is reported under the rule (or rules) it breaks."""
    found = check(obj, previous, final=final)
    assert rules(found) == expected, [str(v) for v in found]
    assert all(v.key == f"{NAMESPACE}/web" for v in found)
    assert all(v.resource_version == obj["metadata"]["resourceVersion"] for v in found)


def test_suspended_and_deleting_stacks_are_exempt_from_the_request_rule() -> None:
    """Requests are not handled while suspended (like flux reconcile) or being deleted."""
    asked = {PULUMI_REQUEST: "r2"}
    assert check(stack(DONE, annotations=asked, spec=WITH_SUSPEND), final=True) == []
    deleting = c.deleting(DONE, 1, Reason.DESTROYING, DESTROYING, T2)
    assert check(stack(deleting, annotations=asked, deleting=True), final=True) == []


def test_a_previous_version_of_another_incarnation_is_not_compared() -> None:
    """A Stack deleted and created again (new uid) starts over: no transition rules apply."""
    assert check(stack(DONE, rv="9", uid="uid-2"), stack(START, uid="uid-1")) == []


def test_check_final_is_what_final_adds_to_check() -> None:
    """``check_final`` reports only the final-state rules."""
    obj = stack({**START, "conditions": START["conditions"][::-1]})
    obj["status"].pop("currentUpdate")
    assert rules(check_final(obj)) == {15}
    assert rules(check(obj, final=True)) == {12, 15}


# -- what the checker says about our own status functions ------------------------------------


SUSPENDED = "Suspended: no Pulumi runs while spec.suspend is true"


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(
            stack(
                c.waiting(DONE, 2, Reason.SUSPENDED, SUSPENDED, T1, ready="Unknown"),
                generation=2,
                spec=WITH_SUSPEND,
            ),
            id="suspended-after-a-spec-change",
        ),
        pytest.param(
            stack(
                c.waiting({}, 1, Reason.SUSPENDED, SUSPENDED, T1, ready="Unknown"),
                spec=WITH_SUSPEND,
            ),
            id="suspended-at-creation",
        ),
    ],
)
def test_a_suspended_stack_reads_in_progress_and_abides_by_the_rules(obj: dict[str, Any]) -> None:
    """The suspend status (Reconciling, Ready Unknown, reason Suspended) is InProgress."""
    assert kstatus.read_status(obj).status is not CURRENT
    assert argo_health.health(obj).status is PROGRESSING
    assert check(obj, final=True) == []


def test_before_the_first_status_write_kstatus_says_current() -> None:
    """A Stack as created (or with only its finalizer added) is Current to kstatus (case 5)."""
    created = stack()
    assert kstatus.read_status(created).status is CURRENT
    assert argo_health.health(created).status is PROGRESSING
    assert rules(check(created, final=True)) == {1, 18}


def test_two_flips_inside_one_second_may_step_back_one_second() -> None:
    """A flip stamped 12:01:00 after one stamped 12:01:01 fits a one-second clock; more does not.

    Times are read when the reconciler decides and truncated to the second, so two flips
    inside one second can be written in the other order of their readings.
    """
    before = stack(retry_flipped_at("2026-01-01T12:01:01Z"))
    after = stack(rerun_at(before["status"]), rv="2")
    assert check(after, before) == []
    before = stack(retry_flipped_at("2026-01-01T12:01:02Z"))
    after = stack(rerun_at(before["status"]), rv="2")
    assert [(v.rule, "went back" in v.detail) for v in check(after, before)] == [(10, True)]
