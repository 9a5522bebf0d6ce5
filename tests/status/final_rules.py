"""Rules on a settled status: what the last version of a Stack must say once work is done.

Role: the state rules that hold only when the operator has finished with a Stack (an
intermediate status may break them for a moment), and ``expected_outcome``, what kstatus
and Argo CD must conclude from a settled status (status contract rule 18). ``FINAL`` and
``FINAL_DELETING`` pair each rule with its number in ``docs/status-contract.md``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from testbed import kstatus
from testbed.kstatus import KStatus
from tests.status import argo_health
from tests.status.argo_health import HealthStatus
from tests.status.status_view import (
    PROGRESSING,
    PROGRESSING_WITH_RETRY,
    READY,
    RECONCILING,
    REQUEST_ANNOTATIONS,
    STALLED,
    Obj,
    StatusView,
    handled_request,
    mapping_of,
    same_int,
)
from tests.status.write_rules import Rule

BARE_COUNT = re.compile(r"\s*\d+\s+[\w\s]*failures?(\(s\))?\.?\s*", re.IGNORECASE)


def expected_outcome(obj: Obj) -> tuple[KStatus, HealthStatus] | None:
    """What kstatus and Argo CD should say about a settled status; None if undecided.

    Status contract rule 18.
    """
    view = StatusView.of(obj)
    if view.deleting:
        return KStatus.TERMINATING, HealthStatus.PROGRESSING
    if view.is_true(STALLED):
        return KStatus.FAILED, HealthStatus.DEGRADED
    if view.is_true(RECONCILING):
        return KStatus.IN_PROGRESS, HealthStatus.PROGRESSING
    if view.is_true(READY):
        return KStatus.CURRENT, HealthStatus.HEALTHY
    return None


# -- final-state rules ---------------------------------------------------------------------


def _rule1_a_status_exists(v: StatusView) -> Iterator[str]:
    if not v.written:
        yield (
            f"no status was ever written (status {dict(v.status)}): kstatus reads a Stack "
            "without status as Current, and one with only the CRD's default as InProgress forever"
        )


def _rule3_ready_is_about_this_generation(v: StatusView) -> Iterator[str]:
    missing = [str(c.get("type")) for c in v.conditions if "observedGeneration" not in c]
    if missing:
        yield f"conditions without observedGeneration: {', '.join(missing)}"
    if not v.is_true(READY):
        return
    observed = v.status.get("observedGeneration")
    if not same_int(observed, v.generation):
        yield f"Ready=True with status.observedGeneration {observed!r} != {v.generation!r}"
    stale = [
        f"{c.get('type')}={c['observedGeneration']!r}"
        for c in v.conditions
        if "observedGeneration" in c and not same_int(c["observedGeneration"], v.generation)
    ]
    if stale:
        yield f"Ready=True with conditions of other generations: {', '.join(stale)}"
    last = mapping_of(v.status.get("lastUpdate"))
    if "generation" in last and not same_int(last["generation"], v.generation):
        yield (
            f"Ready=True claims generation {v.generation!r}, but status.lastUpdate ran "
            f"generation {last['generation']!r}: that spec was never applied"
        )
    if last.get("state") not in {None, "succeeded"}:
        yield f"Ready=True while status.lastUpdate.state is {last.get('state')!r}"


def _rule6_reconciling_is_not_ready(v: StatusView) -> Iterator[str]:
    if v.is_true(RECONCILING) and v.is_true(READY):
        yield "Reconciling=True and Ready=True in a final status"


def _rule8_ready_summarises_the_abnormal_conditions(v: StatusView) -> Iterator[str]:
    ready = v.condition(READY)
    if ready is None:
        return
    if ready.get("status") == "True":
        present = [t for t in (STALLED, RECONCILING) if v.condition(t) is not None]
        if present:
            yield f"Ready=True while {' and '.join(present)} is present"
        return
    stalled = v.condition(STALLED)
    if stalled is not None and stalled.get("status") == "True":
        same = (ready.get("reason"), ready.get("message")) == (
            stalled.get("reason"),
            stalled.get("message"),
        )
        if not same:
            yield f"Ready ({ready.get('reason')}) does not carry Stalled's reason and message"
        return
    reason = v.reconciling_reason()
    if reason not in {None, PROGRESSING_WITH_RETRY} and ready.get("reason") != reason:
        yield f"Ready's reason {ready.get('reason')!r} differs from Reconciling's {reason!r}"


def _rule9_ready_false_carries_the_error(v: StatusView) -> Iterator[str]:
    ready = v.condition(READY)
    if ready is None or ready.get("status") != "False":
        return
    message = ready.get("message")
    if not isinstance(message, str) or not message.strip():
        yield "Ready=False has no message: the underlying error is missing"
    elif BARE_COUNT.fullmatch(message):
        yield f"Ready=False says only {message!r}, not the underlying error"


def _rule15_no_stale_reconciling(v: StatusView) -> Iterator[str]:
    if v.reconciling_reason() == PROGRESSING and not v.status.get("currentUpdate"):
        yield "Reconciling=True/Progressing with no status.currentUpdate: no run is in flight"


def _rule17_request_annotation_is_handled(v: StatusView) -> Iterator[str]:
    annotations = mapping_of(v.metadata.get("annotations"))
    requested = [str(annotations[a]) for a in REQUEST_ANNOTATIONS if annotations.get(a)]
    if requested and not v.suspended and handled_request(v.status) not in requested:
        handled = handled_request(v.status)
        yield f"reconcile request {requested} is not handled (status: {handled!r})"


def _rule18_kstatus_and_argo_agree_with_the_conditions(v: StatusView) -> Iterator[str]:
    computed = kstatus.read_status(v.obj).status
    assessed = argo_health.health(v.obj).status
    expected = expected_outcome(v.obj)
    if expected is None:
        yield (
            f"final status is none of Stalled=True, Reconciling=True, Ready=True "
            f"(kstatus {computed}, Argo {assessed}): nothing is decided and no one is working"
        )
        return
    if (computed, assessed) != expected:
        yield (
            f"kstatus {computed} / Argo {assessed}, but the conditions mean "
            f"{expected[0]} / {expected[1]}"
        )


FINAL: tuple[tuple[int, Rule], ...] = (
    (1, _rule1_a_status_exists),
    (3, _rule3_ready_is_about_this_generation),
    (6, _rule6_reconciling_is_not_ready),
    (8, _rule8_ready_summarises_the_abnormal_conditions),
    (9, _rule9_ready_false_carries_the_error),
    (15, _rule15_no_stale_reconciling),
    (17, _rule17_request_annotation_is_handled),
    (18, _rule18_kstatus_and_argo_agree_with_the_conditions),
)
FINAL_DELETING: tuple[tuple[int, Rule], ...] = (
    (18, _rule18_kstatus_and_argo_agree_with_the_conditions),
)
