"""The kstatus port reproduces upstream ``Compute``: its CR test vectors and the edge cases.

The edge cases follow from the Go code (deletion first, then the generation check, then
Reconciling/Stalled in list order, then the Ready fallback, then Current) and from the
polling layer (NotFound, and Unknown for any error ``Compute`` returns).
"""

from __future__ import annotations

from typing import Any

import pytest

from testbed import kstatus
from testbed.kstatus import KStatus

IN_PROGRESS, FAILED, CURRENT = KStatus.IN_PROGRESS, KStatus.FAILED, KStatus.CURRENT
TERMINATING, NOT_FOUND, UNKNOWN = KStatus.TERMINATING, KStatus.NOT_FOUND, KStatus.UNKNOWN


def cond(type_: str, status: str, reason: str = "Because", message: str = "") -> dict[str, str]:
    """A condition with the four fields kstatus reads."""
    return {"type": type_, "status": status, "reason": reason, "message": message}


def cr(status: Any = None, *, generation: Any = 2, **metadata: Any) -> dict[str, Any]:
    """A custom resource; ``status=None`` leaves the field out, ``generation=None`` too."""
    meta: dict[str, Any] = {"name": "web", "namespace": "team", **metadata}
    if generation is not None:
        meta["generation"] = generation
    obj: dict[str, Any] = {"apiVersion": "pulumi.com/v1", "kind": "Stack", "metadata": meta}
    if status is not None:
        obj["status"] = status
    return obj


def current(*conditions: Any, observed: Any = 2) -> dict[str, Any]:
    """A status that observed generation 2 (the default generation of ``cr``)."""
    return {"observedGeneration": observed, "conditions": list(conditions)}


READY_TRUE = cond("Ready", "True", "Succeeded", "all good")
RECONCILING = cond("Reconciling", "True", "Progressing", "running pulumi up")
STALLED = cond("Stalled", "True", "InvalidSpec", "spec.stack is empty")


@pytest.mark.parametrize(
    ("obj", "expected", "reason"),
    [
        pytest.param(
            cr(current(READY_TRUE), deletionTimestamp="2026-01-01T12:00:00Z"),
            TERMINATING, None, id="1-deleting-wins-over-ready",
        ),
        pytest.param(
            cr(current(READY_TRUE, observed=1)),
            IN_PROGRESS, "LatestGenerationNotObserved", id="2-older-observed-generation",
        ),
        pytest.param(
            cr(current(STALLED, observed=1)),
            IN_PROGRESS, "LatestGenerationNotObserved", id="3-stale-stalled-is-not-failed",
        ),
        pytest.param(
            cr({"observedGeneration": 3}), IN_PROGRESS, "LatestGenerationNotObserved",
            id="4-newer-observed-generation",
        ),
        pytest.param(cr(), CURRENT, None, id="5-no-status-is-current"),
        pytest.param(
            cr({"outputs": {"url": "x"}}), CURRENT, None,
            id="6-no-observed-generation-no-ready",
        ),
        pytest.param(
            cr({"conditions": [READY_TRUE]}, generation=7), CURRENT, None,
            id="6-no-observed-generation-skips-the-generation-check",
        ),
        pytest.param(
            cr(current(RECONCILING, cond("Ready", "Unknown", "Progressing"))),
            IN_PROGRESS, "Progressing", id="7-reconciling",
        ),
        pytest.param(cr(current(STALLED)), FAILED, "InvalidSpec", id="8-stalled"),
        pytest.param(
            cr(current(RECONCILING, STALLED)), IN_PROGRESS, "Progressing",
            id="9-reconciling-listed-first",
        ),
        pytest.param(
            cr(current(STALLED, RECONCILING)), FAILED, "InvalidSpec",
            id="9-stalled-listed-first",
        ),
        pytest.param(
            cr(current(READY_TRUE, RECONCILING)), IN_PROGRESS, "Progressing",
            id="10-ready-and-reconciling",
        ),
        pytest.param(
            cr(current(cond("Reconciling", "False"), READY_TRUE)), CURRENT, None,
            id="11-reconciling-false-is-ignored",
        ),
        pytest.param(
            cr(current(cond("Stalled", "False"), cond("Ready", "False", "UpdateFailed"))),
            IN_PROGRESS, "UpdateFailed", id="11-stalled-false-is-ignored",
        ),
        pytest.param(
            cr(current(cond("Ready", "False", "UpdateFailed"))), IN_PROGRESS, "UpdateFailed",
            id="12-ready-false-is-never-failed",
        ),
        pytest.param(
            cr(current(cond("Ready", "Unknown", "Progressing"))), IN_PROGRESS, "Progressing",
            id="13-ready-unknown",
        ),
        pytest.param(
            cr(current(cond("Synced", "False"))), CURRENT, None, id="14-only-unrelated-conditions",
        ),
        pytest.param(
            cr(current(cond("Ready", "true"))), CURRENT, None, id="15-lowercase-status-ignored",
        ),
        pytest.param(
            cr(current(cond("ready", "False"))), CURRENT, None, id="15-lowercase-type-ignored",
        ),
        pytest.param(
            cr(current(cond("Ready", "true"), cond("Ready", "False", "Later"))),
            IN_PROGRESS, "Later", id="15-walk-continues-past-an-unknown-value",
        ),
        pytest.param(cr(current(READY_TRUE, observed="2")), UNKNOWN, None, id="16-string"),
        pytest.param(cr(current(READY_TRUE, observed=1.5)), UNKNOWN, None, id="16-float"),
        pytest.param(cr(current(READY_TRUE, observed=2.0)), UNKNOWN, None, id="16-float-2.0"),
        pytest.param(cr(current(READY_TRUE, observed=True)), UNKNOWN, None, id="16-bool"),
        pytest.param(cr(current(READY_TRUE, observed=None)), UNKNOWN, None, id="16-null"),
        pytest.param(cr(current(READY_TRUE, observed=2**63)), UNKNOWN, None, id="16-over-int64"),
        pytest.param(cr(current(READY_TRUE), generation="2"), UNKNOWN, None, id="16-generation"),
        pytest.param(
            cr({"observedGeneration": 2, "conditions": {"Ready": "True"}}), UNKNOWN, None,
            id="17-conditions-not-a-list",
        ),
        pytest.param(
            cr({"observedGeneration": 2, "conditions": ["Ready"]}), UNKNOWN, None,
            id="17-condition-not-an-object",
        ),
        pytest.param(
            cr(current({"type": "Ready", "status": True})), UNKNOWN, None,
            id="17-condition-status-not-a-string",
        ),
        pytest.param(cr("Ready"), UNKNOWN, None, id="17-status-not-an-object"),
        pytest.param(None, NOT_FOUND, None, id="18-deleted-object"),
        pytest.param(
            cr(current(READY_TRUE, observed=5), generation=None), CURRENT, None,
            id="19-no-generation-skips-the-check",
        ),
        pytest.param(
            cr(current(cond("Ready", "False", "UpdateFailed")), deletionTimestamp=""),
            IN_PROGRESS, "UpdateFailed", id="empty-deletion-timestamp-is-not-deletion",
        ),
        pytest.param(
            cr(current(READY_TRUE), deletionTimestamp=5), UNKNOWN, None,
            id="deletion-timestamp-not-a-string",
        ),
        pytest.param(
            cr(current(READY_TRUE, None)), CURRENT, None, id="null-condition-is-a-zero-value",
        ),
    ],
)  # fmt: skip
def test_read_status_covers_the_edge_cases(
    obj: dict[str, Any] | None, expected: KStatus, reason: str | None
) -> None:
    """Each edge case gives kstatus's result and the reason of the condition it reports."""
    result = kstatus.read_status(obj)
    assert result.status is expected, result.message
    if reason is not None:
        assert [c.reason for c in result.conditions] == [reason]


@pytest.mark.parametrize(
    ("obj", "expected", "reason"),
    [
        pytest.param(cr(generation=1), CURRENT, None, id="crdNoStatus"),
        pytest.param(
            cr({"conditions": [cond("Ready", "True", "AllOk", "All looks ok")]}, generation=1),
            CURRENT, None, id="crdReady",
        ),
        pytest.param(
            cr(current(cond("Ready", "False", "NotReadyYet"), observed=1), generation=1),
            IN_PROGRESS, "NotReadyYet", id="crdNotReady",
        ),
        pytest.param(
            cr({"conditions": [cond("SomeCondition", "False")]}, generation=1),
            CURRENT, None, id="crdNoCondition",
        ),
        pytest.param(
            cr({"observedGeneration": 1}), IN_PROGRESS, "LatestGenerationNotObserved",
            id="crdMismatchStatusGeneration",
        ),
    ],
)  # fmt: skip
def test_compute_matches_upstream_crd_generic_status_vectors(
    obj: dict[str, Any], expected: KStatus, reason: str | None
) -> None:
    """The vectors of upstream ``TestCRDGenericStatus`` give the same status and reason."""
    result = kstatus.compute(obj)
    assert result.status is expected
    assert [c.reason for c in result.conditions] == ([reason] if reason else [])


def test_a_new_custom_resource_is_in_progress_only_with_the_crds_default_status() -> None:
    """Generation 1 with ``status: {observedGeneration: 0}`` (a CRD default) is InProgress.

    Without any status it is Current: ``checkGeneration`` is skipped when
    ``status.observedGeneration`` is absent, and no condition decides (upstream
    ``crdNoStatus``). That is why the Stack CRD defaults the status.
    """
    defaulted = kstatus.compute(cr({"observedGeneration": 0}, generation=1))
    assert defaulted.status is IN_PROGRESS
    assert [c.reason for c in defaulted.conditions] == ["LatestGenerationNotObserved"]
    assert defaulted.message == "Stack generation is 1, but latest observed generation is 0"
    assert kstatus.compute(cr(generation=1)).status is CURRENT


def test_generation_mismatch_message_names_kind_and_both_generations() -> None:
    """The synthesized message is ``checkGeneration``'s, with the object's kind."""
    result = kstatus.compute(cr({"observedGeneration": 1}, generation=3))
    assert result.message == "Stack generation is 3, but latest observed generation is 1"
    assert result.conditions == (
        kstatus.Condition("Reconciling", "True", "LatestGenerationNotObserved", result.message),
    )


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(cr(current(STALLED)), "spec.stack is empty", id="stalled"),
        pytest.param(cr(current(RECONCILING)), "running pulumi up", id="reconciling"),
        pytest.param(
            cr(current(cond("Ready", "False", "UpdateFailed", "disk on fire"))),
            "disk on fire", id="ready-false",
        ),
        pytest.param(
            cr(current(READY_TRUE), deletionTimestamp="2026-01-01T12:00:00Z"),
            "Resource scheduled for deletion", id="terminating",
        ),
        pytest.param(cr(), "Resource is current", id="default"),
    ],
)  # fmt: skip
def test_messages_come_from_the_deciding_condition(obj: dict[str, Any], expected: str) -> None:
    """Reconciling, Stalled and Ready messages are copied; fixed texts otherwise."""
    assert kstatus.compute(obj).message == expected


def test_compute_raises_where_go_returns_an_error() -> None:
    """``compute`` raises ComputeError; only ``read_status`` turns it into Unknown."""
    with pytest.raises(kstatus.ComputeError, match="observedGeneration"):
        kstatus.compute(cr(current(READY_TRUE, observed="2")))


def test_compute_never_modifies_its_input() -> None:
    """The port is pure: the object is the same before and after."""
    obj = cr(current(RECONCILING, READY_TRUE))
    before = repr(obj)
    kstatus.compute(obj)
    assert repr(obj) == before


@pytest.mark.parametrize(
    ("statuses", "desired", "expected"),
    [
        pytest.param([], CURRENT, CURRENT, id="empty-set-is-desired"),
        pytest.param([CURRENT, CURRENT], CURRENT, CURRENT, id="all-desired"),
        pytest.param([CURRENT, IN_PROGRESS], CURRENT, IN_PROGRESS, id="some-in-progress"),
        pytest.param([UNKNOWN, IN_PROGRESS], CURRENT, UNKNOWN, id="unknown-beats-in-progress"),
        pytest.param([UNKNOWN, FAILED], CURRENT, FAILED, id="failed-beats-unknown"),
        pytest.param([NOT_FOUND, NOT_FOUND], NOT_FOUND, NOT_FOUND, id="all-deleted"),
        pytest.param([TERMINATING], NOT_FOUND, IN_PROGRESS, id="still-terminating"),
    ],
)
def test_aggregate_follows_aggregate_status(
    statuses: list[KStatus], desired: KStatus, expected: KStatus
) -> None:
    """A set is Failed if any is, else Unknown if any is, else desired if all are."""
    assert kstatus.aggregate(statuses, desired) is expected
