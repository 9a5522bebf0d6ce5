"""Our statuses read as design §3 intends, and the invariant checker catches each broken rule.

Every status below is made by the real functions of ``status.conditions``; kstatus and Argo CD
verdicts come from the ports in ``tests.status``. Hand-made violations start from such a
status and break one thing, so that each rule is shown to be able to fail.
"""

from __future__ import annotations

import collections
import datetime
import itertools
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from status import conditions as c
from status.conditions import Reason
from tests.status import argo_health, kstatus
from tests.status.argo_health import HealthStatus
from tests.status.invariants import StackWatcher, Violation, check, check_final
from tests.status.kstatus import KStatus

GROUP, VERSION, PLURAL = "pulumi.com", "v1", "stacks"
NAMESPACE, FINALIZER = "team", "finalizer.stack.pulumi.com"
PULUMI_REQUEST, FLUX_REQUEST = (
    "pulumi.com/reconciliation-request",
    "reconcile.fluxcd.io/requestedAt",
)
T0 = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)
T1, T2, T3 = (T0 + datetime.timedelta(minutes=m) for m in (1, 2, 3))
IN_PROGRESS, FAILED = KStatus.IN_PROGRESS, KStatus.FAILED
CURRENT, TERMINATING = KStatus.CURRENT, KStatus.TERMINATING
HEALTHY, PROGRESSING, DEGRADED = (
    HealthStatus.HEALTHY,
    HealthStatus.PROGRESSING,
    HealthStatus.DEGRADED,
)

Status = dict[str, Any]


def stack(
    status: Mapping[str, Any] | None = None,
    *,
    generation: int = 1,
    rv: str = "1",
    deleting: bool = False,
    annotations: Mapping[str, str] | None = None,
    spec: Mapping[str, Any] | None = None,
    uid: str = "uid-1",
) -> dict[str, Any]:
    """A Stack as the API returns it; ``status=None`` leaves the field out."""
    metadata: dict[str, Any] = {
        "name": "web",
        "namespace": NAMESPACE,
        "uid": uid,
        "generation": generation,
        "resourceVersion": rv,
        "finalizers": [FINALIZER],
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T13:00:00Z"
    if annotations:
        metadata["annotations"] = dict(annotations)
    obj: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Stack",
        "metadata": metadata,
        "spec": dict(spec or {"stack": "dev", "branch": "main"}),
    }
    if status is not None:
        obj["status"] = dict(status)
    return obj


def running(status: Status, generation: int = 1) -> Status:
    """A status of a run in flight, as the reconciler writes it (currentUpdate set)."""
    return {**status, "currentUpdate": {"generation": generation, "type": "up"}}


def concluded(status: Status, generation: int = 1, state: str = "succeeded") -> Status:
    """An outcome write: currentUpdate and progress dropped, lastUpdate recorded."""
    new = {k: v for k, v in status.items() if k not in {"currentUpdate", "progress"}}
    new["lastUpdate"] = {"generation": generation, "state": state, "type": "up"}
    return new


def edit(status: Status, type_: str, /, **fields: Any) -> Status:
    """``status`` with the fields of condition ``type_`` replaced (a hand-made change)."""
    conditions = [{**x, **fields} if x["type"] == type_ else x for x in status["conditions"]]
    return {**status, "conditions": conditions}


def strip(status: Status, type_: str, field: str) -> Status:
    """``status`` with ``field`` removed from condition ``type_``."""
    conditions = [
        {k: v for k, v in x.items() if k != field} if x["type"] == type_ else x
        for x in status["conditions"]
    ]
    return {**status, "conditions": conditions}


def without(status: Status, type_: str) -> Status:
    """``status`` without condition ``type_``."""
    return {**status, "conditions": [x for x in status["conditions"] if x["type"] != type_]}


def condition(type_: str, value: str, reason: str, message: str = "m") -> dict[str, Any]:
    """A well-formed condition for generation 1."""
    return {
        "type": type_,
        "status": value,
        "reason": reason,
        "message": message,
        "observedGeneration": 1,
        "lastTransitionTime": "2026-01-01T12:01:00Z",
    }


START = running(c.progressing({}, 1, "Running pulumi up at commit 0123abc (generation 1)", T0))
DONE = concluded(c.succeeded(START, 1, "pulumi up succeeded (create 1) at commit 0123abc", T1))
RETRY_MESSAGE = "Attempt 1 failed; retrying at 2026-01-01T12:01:10Z"


def retrying(reason: Reason, error: str, retry: str = RETRY_MESSAGE) -> Status:
    """The outcome of a failed attempt that will be retried."""
    return concluded(c.retrying(START, 1, reason, error, retry, T1), state="failed")


def stalled(reason: Reason, message: str) -> Status:
    """The outcome of an attempt that cannot succeed without a change."""
    return concluded(c.stalled(START, 1, reason, message, T1), state="failed")


def waiting(reason: Reason, message: str, ready: str = "False") -> Status:
    """Blocked on a prerequisite or a lock."""
    return c.waiting(START, 1, reason, message, T1, ready=ready)


STALL_REASONS = (
    Reason.INVALID_SPEC,
    Reason.SECRET_NOT_FOUND,
    Reason.AUTHENTICATION_FAILED,
    Reason.SOURCE_UNAVAILABLE,
    Reason.PROGRAM_INVALID,
    Reason.STACK_NOT_FOUND,
    Reason.RETRIES_EXHAUSTED,
)
DESTROYING = f'Destroying the stack\'s resources before removing finalizer "{FINALIZER}"'
BLOCKED = f'destroy failed: boom. The finalizer "{FINALIZER}" stays until the stack is destroyed'


# -- the design §3 table ---------------------------------------------------------------------


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
def test_each_design_row_reads_as_intended_and_breaks_no_rule(
    obj: dict[str, Any], expected_kstatus: KStatus, expected_argo: HealthStatus, *, final: bool
) -> None:
    """Each row of design §3, built with status.conditions, gets its kstatus and Argo verdict."""
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


def rules(found: list[Violation]) -> set[str]:
    """The rule ids in ``found``."""
    return {v.rule for v in found}


BAD_TYPE = condition("not a type", "True", "Fine")
CRD_DEFAULT: Status = {"observedGeneration": 0}  # what the CRD gives a new Stack's status
SPEC2 = {"stack": "dev", "branch": "next"}
RUN2 = running(c.progressing(DONE, 2, "Running pulumi up (generation 2)", T2), 2)
# The operator concludes generation 2's run but reports generation 1: a lie (G5).
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
        pytest.param(stack({"observedGeneration": 1, "conditions": []}), None, False, {"G1"},
                     id="G1-status-without-ready"),
        pytest.param(stack({k: v for k, v in DONE.items() if k != "observedGeneration"}), None,
                     False, {"G1"}, id="G1-status-without-observed-generation"),
        pytest.param(stack(DONE, rv="2"), stack(), False, {"G1"}, id="G1-first-write-is-ready"),
        pytest.param(stack(DONE, rv="2"), stack(CRD_DEFAULT), False, {"G1"},
                     id="G1-first-write-after-the-crd-default-is-ready"),
        pytest.param(stack(CRD_DEFAULT), None, True, {"G1", "G18"},
                     id="G1-final-with-only-the-crd-default"),
        pytest.param(stack(), None, True, {"G1", "G18"}, id="G1-final-without-status"),
        pytest.param(stack({**DONE, "observedGeneration": "1"}), None, False, {"G2"},
                     id="G2-observed-generation-is-a-string"),
        pytest.param(stack({**DONE, "observedGeneration": 3}), None, False, {"G2"},
                     id="G2-observed-generation-ahead"),
        pytest.param(stack(edit(DONE, "Ready", observedGeneration=2)), None, False, {"G2"},
                     id="G2-condition-generation-ahead"),
        pytest.param(stack(DONE, generation=2), None, True, {"G3", "G18"},
                     id="G3-ready-for-an-older-generation"),
        pytest.param(stack(restamped(DONE, 2), generation=2), None, True, {"G3"},
                     id="G3-ready-but-last-update-ran-another-generation"),
        pytest.param(stack(strip(DONE, "Ready", "observedGeneration")), None, True,
                     {"G3"}, id="G3-condition-without-observed-generation"),
        pytest.param(stack({**START, "conditions": [condition("Stalled", "True", "InvalidSpec"),
                                                    *START["conditions"]]}),
                     None, False, {"G4", "G5"}, id="G4-reconciling-and-stalled"),
        pytest.param(stack(stalled(Reason.INVALID_SPEC, "bad"), generation=2), None, False,
                     {"G5"}, id="G5-stalled-for-an-older-generation"),
        pytest.param(stack(STALE_STALL, rv="2", generation=2, spec=SPEC2),
                     stack(RUN2, generation=2, spec=SPEC2), False, {"G5"},
                     id="G5-operator-writes-stalled-for-an-older-generation"),
        pytest.param(stack(edit(stalled(Reason.INVALID_SPEC, "bad"), "Ready", status="Unknown")),
                     None, False, {"G5", "G6"}, id="G5-stalled-with-ready-unknown"),
        pytest.param(stack(without(START, "Reconciling")), None, False, {"G6"},
                     id="G6-ready-unknown-without-reconciling"),
        pytest.param(stack({**DONE, "conditions": [
                         condition("Reconciling", "True", "ProgressingWithRetry"),
                         *DONE["conditions"]]}),
                     None, True, {"G6", "G8"}, id="G6-final-reconciling-and-ready"),
        pytest.param(stack({**DONE, "conditions": [condition("Reconciling", "False", "Done"),
                                                   *DONE["conditions"]]}),
                     None, False, {"G7"}, id="G7-reconciling-false"),
        pytest.param(stack({**retrying(Reason.UPDATE_FAILED, "e"), "conditions": [
                         condition("Stalled", "False", "Fine"),
                         *retrying(Reason.UPDATE_FAILED, "e")["conditions"]]}),
                     None, False, {"G4", "G7"}, id="G7-stalled-false"),
        pytest.param(stack(edit(stalled(Reason.INVALID_SPEC, "bad"), "Ready",
                                reason="UpdateFailed")),
                     None, True, {"G8"}, id="G8-ready-does-not-carry-stalled-reason"),
        pytest.param(stack(edit(waiting(Reason.DEPENDENCY_NOT_READY, "first"), "Ready",
                                reason="UpdateFailed")),
                     None, True, {"G8"}, id="G8-ready-does-not-carry-reconciling-reason"),
        pytest.param(stack(retrying(Reason.UPDATE_FAILED, "2 update failure(s)")), None, True,
                     {"G9"}, id="G9-ready-false-with-a-bare-count"),
        pytest.param(stack(retrying(Reason.UPDATE_FAILED, "")), None, True, {"G9"},
                     id="G9-ready-false-without-a-message"),
        pytest.param(stack(edit(DONE, "Ready", lastTransitionTime="2026-01-01T12:05:00Z"), rv="2"),
                     stack(DONE), False, {"G10", "G13"}, id="G10-time-moved-status-unchanged"),
        pytest.param(stack(concluded(c.succeeded(retrying(Reason.UPDATE_FAILED, "e"), 1, "ok",
                                                 T0)), rv="2"),
                     stack(retrying(Reason.UPDATE_FAILED, "e")), False, {"G10"},
                     id="G10-time-went-back"),
        pytest.param(stack(edit(DONE, "Ready", lastTransitionTime="2026-01-01T12:01:01Z"), rv="2"),
                     stack(DONE), False, {"G10", "G13"},
                     id="G10-time-moved-one-second-status-unchanged"),
        pytest.param(stack(rerun_at(retry_flipped_at("2026-01-01T12:01:02Z")), rv="2"),
                     stack(retry_flipped_at("2026-01-01T12:01:02Z")), False, {"G10"},
                     id="G10-flip-went-back-two-seconds"),
        pytest.param(stack(edit(DONE, "Ready", lastTransitionTime="2026-01-01T13:01:00+01:00")),
                     None, False, {"G10"}, id="G10-time-not-utc"),
        pytest.param(stack({**DONE, "conditions": [*DONE["conditions"], BAD_TYPE]}), None,
                     False, {"G11"}, id="G11-type-not-a-qualified-name"),
        pytest.param(stack({**DONE, "conditions": [*DONE["conditions"],
                                                   condition("Synced", "Maybe", "Fine")]}),
                     None, False, {"G11"}, id="G11-status-not-in-enum"),
        pytest.param(stack(edit(DONE, "Ready", reason="Update-Failed")), None, False, {"G11"},
                     id="G11-reason-pattern"),
        pytest.param(stack(edit(DONE, "Ready", reason="R" * 1025)), None, False, {"G11"},
                     id="G11-reason-too-long"),
        pytest.param(stack(edit(DONE, "Ready", message=LONG)), None, False, {"G11"},
                     id="G11-message-too-long"),
        pytest.param(stack(strip(DONE, "Ready", "message")), None, False, {"G11"},
                     id="G11-message-missing"),
        pytest.param(stack(edit(DONE, "Ready", lastTransitionTime="yesterday")), None, False,
                     {"G11"}, id="G11-time-not-rfc3339"),
        pytest.param(stack({**DONE, "conditions": DONE["conditions"] * 2}), None, False,
                     {"G11"}, id="G11-duplicate-type"),
        pytest.param(stack({**DONE, "conditions": {"Ready": "True"}}), None, False,
                     {"G1", "G11"}, id="G11-conditions-not-a-list"),
        pytest.param(stack({**DONE, "conditions": [*DONE["conditions"], "Ready"]}), None,
                     False, {"G11"}, id="G11-condition-not-an-object"),
        pytest.param(stack({**START, "conditions": START["conditions"][::-1]}), None, False,
                     {"G12"}, id="G12-ready-before-reconciling"),
        pytest.param(stack({**DONE, "lastUpdate": {**DONE["lastUpdate"],
                                                   "lastResyncTime": "2026-01-01T12:09:00Z"}},
                           rv="2"),
                     stack({**DONE, "lastUpdate": {**DONE["lastUpdate"],
                                                   "lastResyncTime": "2026-01-01T12:01:00Z"}}),
                     False, {"G13"}, id="G13-idle-heartbeat-write"),
        pytest.param(stack(DONE, generation=2, rv="2"), stack(DONE), False, {"G14"},
                     id="G14-generation-bumped-without-a-spec-change"),
        pytest.param(stack(c.succeeded(DONE, 2, "ok", T1), generation=2, rv="2"),
                     stack(c.succeeded(DONE, 2, "ok", T1), generation=3,
                           spec={"stack": "dev", "branch": "x"}),
                     False, {"G14"}, id="G14-generation-went-back"),
        pytest.param(stack({k: v for k, v in START.items() if k != "currentUpdate"}, rv="2"),
                     stack(START), False, {"G15"}, id="G15-run-ended-but-still-progressing"),
        pytest.param(stack({k: v for k, v in START.items() if k != "currentUpdate"}), None,
                     True, {"G15"}, id="G15-final-progressing-without-a-run"),
        pytest.param(stack(edit(DONE, "Ready", message="still here"), rv="2", deleting=True),
                     stack(DONE, deleting=True), False, {"G16"},
                     id="G16-deletion-write-without-a-step"),
        pytest.param(stack(c.deleting(DONE, 1, Reason.DESTROYING, "", T2), rv="2", deleting=True),
                     stack(DONE, deleting=True), False, {"G16"},
                     id="G16-deletion-step-without-a-message"),
        pytest.param(stack({**DONE, "observedReconcileRequest": "r1",
                            "lastHandledReconcileAt": "r2"}),
                     None, False, {"G17"}, id="G17-handshake-fields-disagree"),
        pytest.param(stack({**running(c.progressing(DONE, 1, "Running", T2)),
                            "observedReconcileRequest": "r1", "lastHandledReconcileAt": "r1"},
                           rv="2", annotations={PULUMI_REQUEST: "r1"}),
                     stack(DONE, annotations={PULUMI_REQUEST: "r1"}), False, {"G17"},
                     id="G17-handled-before-the-run-concluded"),
        pytest.param(stack({**DONE, "observedReconcileRequest": "r1",
                            "lastHandledReconcileAt": "r1"},
                           annotations={PULUMI_REQUEST: "r2"}),
                     None, True, {"G17"}, id="G17-final-request-not-handled"),
        pytest.param(stack(edit(DONE, "Ready", status="False", reason="UpdateFailed")), None,
                     True, {"G18"}, id="G18-nothing-decided-and-nobody-working"),
        pytest.param(stack({**DONE, "conditions": [
                         *DONE["conditions"],
                         condition("Reconciling", "True", "ProgressingWithRetry")]}),
                     None, True, {"G6", "G8", "G12", "G18"},
                     id="G18-argo-healthy-while-reconciling"),
    ],
)  # fmt: skip
def test_each_rule_catches_a_hand_made_violation(
    obj: dict[str, Any], previous: dict[str, Any] | None, *, final: bool, expected: set[str]
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
    assert rules(check_final(obj)) == {"G15"}
    assert rules(check(obj, final=True)) == {"G12", "G15"}


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
    assert rules(check(created, final=True)) == {"G1", "G18"}


# -- what the operator does not control is not blamed on it -----------------------------------


def test_the_crds_default_status_is_not_a_write(watcher: StackWatcher) -> None:
    """A new Stack carries the CRD's ``{observedGeneration: 0}``: InProgress, not a bad write.

    The finalizer patch keeps it; the operator's first real write is judged as the first.
    """
    created = stack(CRD_DEFAULT)
    assert kstatus.read_status(created).status is IN_PROGRESS
    finalized = stack(CRD_DEFAULT, rv="2")
    watcher.observe("ADDED", created)
    watcher.observe("MODIFIED", finalized)
    watcher.observe("MODIFIED", stack(START, rv="3"))
    assert watcher.violations() == []
    assert check(created) == []


def test_a_user_edit_of_a_stalled_stack_is_not_blamed_on_the_operator(
    watcher: StackWatcher,
) -> None:
    """The user's new generation shows the old Stalled status: kstatus InProgress, no lie.

    That version (generation 2, observedGeneration 1, Stalled=True) is the apiserver's
    answer to the user's edit; the operator's next write is judged as usual.
    """
    stall = stalled(Reason.INVALID_SPEC, "spec.stack is empty")
    edited = stack(stall, rv="2", generation=2, spec=SPEC2)
    assert kstatus.read_status(edited).status is IN_PROGRESS
    assert check(edited, stack(stall)) == []
    rerun = running(c.progressing(stall, 2, "Running pulumi up (generation 2)", T2), 2)
    versions = [stack(stall), edited, stack(rerun, rv="3", generation=2, spec=SPEC2)]
    for event, obj in zip(("ADDED", "MODIFIED", "MODIFIED"), versions, strict=True):
        watcher.observe(event, obj)
    assert watcher.violations() == []


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
    assert [(v.rule, "went back" in v.detail) for v in check(after, before)] == [("G10", True)]


# -- the watcher, fed by hand ----------------------------------------------------------------


@pytest.fixture
def watcher() -> Any:
    """A StackWatcher that is never started: tests feed it versions with ``observe``."""
    with client.ApiClient() as api:
        yield StackWatcher(api, NAMESPACE)


def test_the_watcher_records_versions_and_compares_each_with_the_one_before(
    watcher: StackWatcher,
) -> None:
    """Versions are kept in order; a transition rule sees the version before."""
    watcher.observe("ADDED", stack())
    watcher.observe("MODIFIED", stack(START, rv="2"))
    moved = edit(START, "Ready", lastTransitionTime="2026-01-01T12:09:00Z")
    watcher.observe("MODIFIED", stack(moved, rv="3"))
    assert [o.resource_version for o in watcher.observations("web")] == ["1", "2", "3"]
    assert [(v.resource_version, v.rule) for v in watcher.violations()] == [("3", "G10")]
    assert watcher.names() == ["web"]


def test_the_watcher_does_not_compare_across_a_gap(watcher: StackWatcher) -> None:
    """After a relist (versions may be missing) the next version is judged on its own."""
    watcher.observe("ADDED", stack(START))
    watcher.observe("LISTED", stack(DONE, rv="7", generation=3, spec={"stack": "x"}), gap=True)
    assert watcher.violations() == []


def test_assert_clean_lists_object_version_rule_and_detail(watcher: StackWatcher) -> None:
    """The failure names every violation: object, resourceVersion, rule id, detail."""
    watcher.observe("ADDED", stack({**START, "observedGeneration": 3}, rv="5"))
    watcher.observe("MODIFIED", stack(DONE, rv="6"))
    with pytest.raises(AssertionError) as failure:
        watcher.assert_clean()
    text = str(failure.value)
    assert "1 status invariant violation(s)" in text
    assert "team/web (resourceVersion 5) G2: status.observedGeneration 3 is ahead" in text


def test_final_check_maps_deleting_stacks_and_skips_deleted_ones(watcher: StackWatcher) -> None:
    """A deleted Stack is NotFound (nothing to judge); a deleting one must read Terminating."""
    watcher.observe("ADDED", stack(START))
    watcher.observe("DELETED", stack(START, rv="2"))
    assert watcher.final_check() == []
    deleting = stack(c.deleting(DONE, 1, Reason.DESTROYING, DESTROYING, T2), deleting=True)
    watcher.observe("ADDED", deleting | {"metadata": {**deleting["metadata"], "uid": "u2"}})
    assert watcher.final_check() == []
    watcher.assert_clean()


def test_final_check_wants_the_latest_request_handled(watcher: StackWatcher) -> None:
    """A Flux request added after a handled Pulumi one must be handled too (G17 across versions).

    One version alone cannot tell: it records r1, and r1 is one of the two annotations.
    """
    handled = {**DONE, "observedReconcileRequest": "r1", "lastHandledReconcileAt": "r1"}
    watcher.observe("ADDED", stack(handled, annotations={PULUMI_REQUEST: "r1"}))
    both = {PULUMI_REQUEST: "r1", FLUX_REQUEST: "2026-01-01T12:30:00.123Z"}
    last = stack(handled, rv="2", annotations=both)
    watcher.observe("MODIFIED", last)
    assert check(last, final=True) == []
    found = watcher.final_check()
    assert [(v.rule, v.resource_version) for v in found] == [("G17", "2")]
    assert FLUX_REQUEST in found[0].detail


# -- the watcher against a real apiserver ----------------------------------------------------


def rv_of(obj: object) -> str:
    """The resourceVersion of an object the API returned."""
    assert isinstance(obj, Mapping)
    return str(obj["metadata"]["resourceVersion"])


@pytest.mark.integration
def test_the_watcher_sees_every_version_and_reports_exactly_the_bad_one(
    api_client: client.ApiClient, stack_crd: Path, namespace: str
) -> None:
    """Statuses patched through /status are all recorded across watch renewals; one is bad."""
    del stack_crd
    api = client.CustomObjectsApi(api_client)
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Stack", "metadata": {"name": "web"},
            "spec": {"stack": "dev"}}  # fmt: skip
    start = running(c.progressing({}, 1, "Running pulumi up at commit 0123abc", T0))
    good = concluded(c.succeeded(start, 1, "pulumi up succeeded (create 1)", T1))
    reconciling_false = condition("Reconciling", "False", "Done", "left behind") | {
        "lastTransitionTime": "2026-01-01T12:01:00Z"
    }
    bad = {**good, "conditions": [reconciling_false, *good["conditions"]]}
    patches: list[Callable[[], object]] = [
        lambda: api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body),
        *(
            lambda status=status: api.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, PLURAL, "web", {"status": status}
            )
            for status in (start, {**bad, "currentUpdate": None}, good)
        ),
    ]
    with StackWatcher(api_client, namespace, timeout_seconds=1) as watcher:
        written = []
        for patch in patches:
            written.append(rv_of(patch()))
            time.sleep(1.5)  # outlive the 1 s watch: the next version arrives on a renewed one
        watcher.wait_for("web", written[-1])
    assert [o.resource_version for o in watcher.observations("web")] == written
    assert [o.event for o in watcher.observations("web")] == ["ADDED", *["MODIFIED"] * 3]
    assert watcher.restarts >= 3
    found = watcher.violations()
    assert [(v.resource_version, v.rule) for v in found] == [(written[2], "G7")], found
    assert watcher.final_check() == []
    with pytest.raises(AssertionError, match=rf"resourceVersion {written[2]}\) G7: Reconciling"):
        watcher.assert_clean()


def flips_of(*statuses: Status) -> collections.Counter[tuple[str, str, str]]:
    """(type, status, reason) of every condition that appears in or changes across ``statuses``."""
    found: collections.Counter[tuple[str, str, str]] = collections.Counter()
    before: dict[str, str] = {}
    for status in statuses:
        for x in status.get("conditions", []):
            if before.get(x["type"]) != x["status"]:
                found[(x["type"], x["status"], x["reason"])] += 1
        before = {x["type"]: x["status"] for x in status.get("conditions", [])}
    return found


def test_transitions_count_appearances_and_status_flips_not_message_changes(
    watcher: StackWatcher,
) -> None:
    """The watcher counts what the operator's transition counter must have counted."""
    watcher.observe("ADDED", stack())
    watcher.observe("MODIFIED", stack(START, rv="2"))
    watcher.observe("MODIFIED", stack(DONE, rv="3"))
    watcher.observe("MODIFIED", stack(edit(DONE, "Ready", message="reworded"), rv="4"))
    expected = flips_of(START, DONE)
    assert watcher.transitions() == expected
    assert sum(expected.values()) >= 3  # Ready twice, Reconciling at least once
    assert ("Ready", "True", str(Reason.SUCCEEDED)) in expected


def test_transitions_skip_versions_seen_before_since_and_after_a_gap(
    watcher: StackWatcher,
) -> None:
    """Only versions recorded from ``since`` on count, and never one right after a gap."""
    watcher.observe("ADDED", stack())
    watcher.observe("MODIFIED", stack(START, rv="2"))
    since = time.monotonic()
    watcher.observe("LISTED", stack(DONE, rv="7"), gap=True)
    assert watcher.transitions() == flips_of(START)
    assert watcher.transitions(since) == collections.Counter()
