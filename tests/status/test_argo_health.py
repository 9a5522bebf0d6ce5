"""The Argo CD ``pulumi.com/Stack`` health check port follows the rules its module states."""

from __future__ import annotations

from typing import Any

import pytest

from testbed import kstatus
from testbed.kstatus import KStatus
from tests.status import argo_health
from tests.status.argo_health import (
    PENDING_DELETION,
    WAITING_FOR_OBSERVATION,
    WAITING_FOR_RECONCILE,
    HealthStatus,
)

HEALTHY, PROGRESSING, DEGRADED = (
    HealthStatus.HEALTHY,
    HealthStatus.PROGRESSING,
    HealthStatus.DEGRADED,
)


def cond(type_: str, status: str, message: str = "") -> dict[str, str]:
    """A condition with what the Lua reads."""
    return {"type": type_, "status": status, "reason": "Because", "message": message}


def stack(status: Any = None, *, generation: Any = 1, **metadata: Any) -> dict[str, Any]:
    """A Stack; ``status=None`` leaves the field out."""
    obj: dict[str, Any] = {
        "apiVersion": "pulumi.com/v1",
        "kind": "Stack",
        "metadata": {"name": "web", "generation": generation, **metadata},
    }
    if status is not None:
        obj["status"] = status
    return obj


def observed(*conditions: Any, generation: Any = 1) -> dict[str, Any]:
    """A status that observed ``generation``."""
    return {"observedGeneration": generation, "conditions": list(conditions)}


READY = cond("Ready", "True", "pulumi up succeeded")
RECONCILING = cond("Reconciling", "True", "Running pulumi up")
STALLED = cond("Stalled", "True", "spec.stack is empty")


@pytest.mark.parametrize(
    ("obj", "expected", "message"),
    [
        pytest.param(stack(observed(READY)), HEALTHY, "pulumi up succeeded", id="healthy"),
        pytest.param(
            stack(observed(RECONCILING, cond("Ready", "Unknown"))), PROGRESSING,
            "Running pulumi up", id="progressing",
        ),
        pytest.param(
            stack(observed(STALLED, cond("Ready", "False"))), DEGRADED, "spec.stack is empty",
            id="degraded",
        ),
        pytest.param(
            stack(observed(READY), generation=2), PROGRESSING, WAITING_FOR_OBSERVATION,
            id="pending-generation",
        ),
        pytest.param(
            stack(
                observed(READY),
                deletionTimestamp="2026-01-01T12:00:00Z",
                finalizers=["finalizer.stack.pulumi.com", "other"],
            ),
            PROGRESSING,
            f"{PENDING_DELETION}; blocked by finalizers: finalizer.stack.pulumi.com, other",
            id="terminating",
        ),
        pytest.param(
            stack(observed(STALLED), deletionTimestamp="2026-01-01T12:00:00Z"),
            PROGRESSING, PENDING_DELETION, id="deletion-wins-over-stalled",
        ),
        pytest.param(stack(), PROGRESSING, WAITING_FOR_OBSERVATION, id="no-status"),
        pytest.param(
            stack({"conditions": [READY]}), PROGRESSING, WAITING_FOR_OBSERVATION,
            id="no-observed-generation-is-progressing-forever",
        ),
        pytest.param(
            stack(observed(READY, generation=3), generation=2), PROGRESSING,
            WAITING_FOR_OBSERVATION, id="observed-generation-ahead",
        ),
        pytest.param(
            stack(observed(STALLED, generation=1), generation=2), PROGRESSING,
            WAITING_FOR_OBSERVATION, id="stale-stalled-is-not-degraded",
        ),
        pytest.param(
            stack(observed(READY, RECONCILING)), HEALTHY, "pulumi up succeeded",
            id="ready-listed-before-reconciling",
        ),
        pytest.param(
            stack(observed(RECONCILING, READY)), PROGRESSING, "Running pulumi up",
            id="reconciling-listed-before-ready",
        ),
        pytest.param(
            stack(observed(RECONCILING, STALLED)), PROGRESSING, "Running pulumi up",
            id="reconciling-listed-before-stalled",
        ),
        pytest.param(
            stack(observed(cond("Ready", "False", "disk on fire"))), PROGRESSING,
            WAITING_FOR_RECONCILE, id="ready-false-is-never-degraded",
        ),
        pytest.param(
            stack(observed(cond("Ready", "Unknown"))), PROGRESSING, WAITING_FOR_RECONCILE,
            id="ready-unknown",
        ),
        pytest.param(
            stack(observed(cond("Stalled", "False"), cond("Reconciling", "False"))),
            PROGRESSING, WAITING_FOR_RECONCILE, id="false-conditions-are-ignored",
        ),
        pytest.param(
            stack(observed(cond("Ready", "true"))), PROGRESSING, WAITING_FOR_RECONCILE,
            id="lowercase-status-is-not-true",
        ),
        pytest.param(
            stack(observed(READY, generation=1.0)), HEALTHY, "pulumi up succeeded",
            id="lua-numbers-compare-numerically",
        ),
        pytest.param(
            stack(observed(READY, generation="1")), PROGRESSING, WAITING_FOR_OBSERVATION,
            id="lua-string-is-not-a-number",
        ),
        pytest.param(
            stack(observed(READY, generation=True)), PROGRESSING, WAITING_FOR_OBSERVATION,
            id="lua-boolean-is-not-a-number",
        ),
        pytest.param(
            stack(observed(None, READY)), PROGRESSING, WAITING_FOR_RECONCILE,
            id="ipairs-stops-at-a-null-condition",
        ),
        pytest.param(
            stack(observed("Ready", READY)), HEALTHY, "pulumi up succeeded",
            id="a-non-table-condition-has-no-fields",
        ),
        pytest.param(
            stack({"observedGeneration": 1, "conditions": "Ready"}), PROGRESSING,
            WAITING_FOR_RECONCILE, id="conditions-not-an-array",
        ),
    ],
)  # fmt: skip
def test_health_follows_the_documented_rules(
    obj: dict[str, Any], expected: HealthStatus, message: str
) -> None:
    """Each rule of the health check (and the upstream fixture names) gives its health."""
    assessed = argo_health.health(obj)
    assert assessed.status is expected
    assert assessed.message == message


@pytest.mark.parametrize(
    ("obj", "expected_kstatus", "expected_argo"),
    [
        pytest.param(stack(), KStatus.CURRENT, PROGRESSING, id="no-status"),
        pytest.param(
            stack({"conditions": [READY]}), KStatus.CURRENT, PROGRESSING,
            id="no-observed-generation",
        ),
        pytest.param(
            stack(observed(generation=1)), KStatus.CURRENT, PROGRESSING, id="no-conditions",
        ),
        pytest.param(
            stack(observed(READY, generation="1")), KStatus.UNKNOWN, PROGRESSING,
            id="string-observed-generation",
        ),
        pytest.param(
            stack(observed(READY, RECONCILING)), KStatus.IN_PROGRESS, HEALTHY,
            id="ready-before-reconciling",
        ),
        pytest.param(
            stack(observed(READY, STALLED)), KStatus.FAILED, HEALTHY, id="ready-before-stalled",
        ),
        pytest.param(
            stack(observed(STALLED), deletionTimestamp="2026-01-01T12:00:00Z"),
            KStatus.TERMINATING, PROGRESSING, id="deleting",
        ),
    ],
)  # fmt: skip
def test_where_kstatus_and_argo_disagree(
    obj: dict[str, Any], expected_kstatus: KStatus, expected_argo: HealthStatus
) -> None:
    """The statuses on which the two tools reach different verdicts, pinned side by side."""
    assert kstatus.read_status(obj).status is expected_kstatus
    assert argo_health.health(obj).status is expected_argo


@pytest.mark.parametrize(
    ("left", "right", "equal"),
    [
        pytest.param(1, 1.0, True, id="int-float"),
        pytest.param(None, None, True, id="nil-nil"),
        pytest.param(1, None, False, id="number-nil"),
        pytest.param(True, 1, False, id="boolean-number"),
        pytest.param("1", 1, False, id="string-number"),
        pytest.param("a", "a", True, id="string-string"),
    ],
)
def test_lua_equality(left: object, right: object, *, equal: bool) -> None:
    """``lua_equal`` is Lua 5.1's ``==`` on JSON values."""
    assert argo_health.lua_equal(left, right) is equal
